package main

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
)

func run(t *testing.T, args ...string) []byte {
	t.Helper()
	var out, errOut bytes.Buffer
	rootCmd.SetOut(&out)
	rootCmd.SetErr(&errOut)
	rootCmd.SetArgs(args)
	defer rootCmd.SetArgs(nil)
	if err := rootCmd.Execute(); err != nil {
		t.Fatalf("bpfleet %s: %v (stderr %s)", strings.Join(args, " "), err, errOut.String())
	}
	return out.Bytes()
}

func TestProbeCommandJSON(t *testing.T) {
	var r struct {
		Kernel struct {
			Release string `json:"release"`
			Arch    string `json:"arch"`
		} `json:"kernel"`
		AttachTypes []struct {
			AttachType string `json:"attach_type"`
			Supported  bool   `json:"supported"`
			Reason     string `json:"reason"`
		} `json:"attach_types"`
	}
	if err := json.Unmarshal(run(t, "probe", "-o", "json"), &r); err != nil {
		t.Fatal(err)
	}
	if r.Kernel.Release == "" || r.Kernel.Arch == "" || len(r.AttachTypes) == 0 {
		t.Fatalf("incomplete report: %+v", r)
	}
	for _, a := range r.AttachTypes {
		if !a.Supported && a.Reason == "" {
			t.Errorf("%s unsupported without a reason", a.AttachType)
		}
	}
}

func TestBenchCommandJSON(t *testing.T) {
	var r struct {
		Results []map[string]any `json:"results"`
	}
	out := run(t, "bench", "--attach-types", "raw_tp,fentry", "--mode", "syscall", "--calls", "5000", "--rounds", "1", "-o", "json")
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatal(err)
	}
	if len(r.Results) != 2 {
		t.Fatalf("want 2 results, got %s", out)
	}
	for _, res := range r.Results {
		for _, f := range []string{"attach_type", "supported", "baseline_ns_per_call", "ns_per_call", "overhead_ns", "ops_per_sec", "stats_enabled", "rounds"} {
			if _, ok := res[f]; !ok {
				t.Errorf("result has no %s: %v", f, res)
			}
		}
	}
}

func TestBenchCommandRejectsBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"bench", "--attach-types", "fentry,nope"},
		{"bench", "--mode", "user"},
		{"bench", "--stats", "maybe"},
		{"bench", "-o", "yaml"},
		{"probe", "-o", "yaml"},
	} {
		rootCmd.SetArgs(args)
		rootCmd.SetOut(&bytes.Buffer{})
		err := rootCmd.Execute()
		rootCmd.SetArgs(nil)
		if err == nil {
			t.Errorf("bpfleet %s accepted", strings.Join(args, " "))
		}
	}
}
