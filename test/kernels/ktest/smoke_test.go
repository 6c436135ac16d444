package ktest

import "testing"

func TestSmoke(t *testing.T)   { t.Log("hello") }
func TestSkipper(t *testing.T) { t.Skipf("because: reason") }
