//go:build kmatrix_failing

// Package failing is a deliberately failing test binary: the harness's own
// test boots it to prove a failing kernel test fails the matrix. The build
// tag keeps it out of `go test ./...`.
package failing

import "testing"

func TestPasses(t *testing.T) {}

func TestFailsOnPurpose(t *testing.T) { t.Fatal("deliberate failure") }
