package main

import (
	"bytes"
	"strings"
	"testing"
)

// Bad flag values fail before anything touches the kernel, naming the flag.
func TestAgentFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		// Every case sets all three: cobra keeps flag values between runs.
		{[]string{"agent", "--interval", "1s", "--max-programs", "0", "--metrics-level", "pods"}, "--metrics-level"},
		{[]string{"agent", "--interval", "0s", "--max-programs", "0", "--metrics-level", "program"}, "--interval"},
		{[]string{"agent", "--interval", "1s", "--max-programs", "-1", "--metrics-level", "program"}, "--max-programs"},
		{[]string{"agent", "--interval", "1s", "--max-programs", "0", "--metrics-level", "workload", "--export-interval", "-1s"}, "--export-interval"},
	} {
		var out bytes.Buffer
		rootCmd.SetArgs(tc.args)
		rootCmd.SetOut(&out)
		rootCmd.SetErr(&out)
		err := rootCmd.Execute()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: error %v, want one naming %s", tc.args, err, tc.want)
		}
	}
}
