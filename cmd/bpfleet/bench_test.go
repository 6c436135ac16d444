package main

import (
	"slices"
	"strings"
	"testing"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/probes/bench"
	"github.com/bpfleet/bpfleet/probes/catalog"
)

// TestBenchOptions: bench's enums are checked next to the command, with
// internal/config's checks of the rest, every problem at once, one line
// each; valid flags become the bench's options.
func TestBenchOptions(t *testing.T) {
	o, err := benchOptions(&config.Bench{Mode: "auto", Stats: "off", Rounds: 5, Batch: 1, Output: "json", AttachTypes: "raw_tp, tp_btf"})
	if err != nil {
		t.Fatalf("bench ok: %v", err)
	}
	if want := []catalog.AttachType{catalog.RawTp, catalog.TpBTF}; !slices.Equal(o.AttachTypes, want) || o.Mode != bench.Auto || o.Stats != bench.StatsOff || o.Rounds != 5 || o.Batch != 1 {
		t.Errorf("bench ok: options %+v", o)
	}

	_, err = benchOptions(&config.Bench{Mode: "x", Stats: "x", Calls: -1, Output: "x", AttachTypes: "nope"})
	var names []string
	var walk func(error)
	walk = func(err error) {
		switch e := err.(type) {
		case interface{ Unwrap() []error }:
			for _, e := range e.Unwrap() {
				walk(e)
			}
		case *config.Problem:
			names = append(names, e.Name)
		default:
			t.Errorf("%T %v is not a Problem", err, err)
		}
	}
	walk(err)
	want := []string{"--attach-types", "--mode", "--stats", "--calls", "--rounds", "--batch", "--output"}
	if !slices.Equal(names, want) {
		t.Errorf("bench all: problems %v, want %v: %v", names, want, err)
	}
	if n := strings.Count(err.Error(), "\n") + 1; n != len(names) {
		t.Errorf("%d lines for %d problems: %q", n, len(names), err.Error())
	}
	if !config.IsUsage(err) {
		t.Error("bench's problems are usage errors (exit status 2)")
	}
}
