package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/bpfleet/bpfleet/api"
	"github.com/bpfleet/bpfleet/test/canary/canarytest"
)

// TestMissesRemoteSelectors: misses --remote picks programs with the
// selectors of profile and of a local misses PROG (tag:, attach: too),
// matched against the remote agent's programs: a selector that picks the
// canary shows it, one that picks nothing is an error, not an empty
// stream. Whatever it shows starts with the watcher's state record.
func TestMissesRemoteSelectors(t *testing.T) {
	bin := bpfleetBin(t)
	c, id := canarytest.Load(t)
	addr, tokenFile := serveAgent(t, c, 50*time.Millisecond, nil)
	token, err := os.ReadFile(tokenFile)
	if err != nil {
		t.Fatal(err)
	}
	s, err := api.FetchSnapshot(context.Background(), "http://"+addr, strings.TrimSpace(string(token)))
	if err != nil {
		t.Fatal(err)
	}
	var tag, attach string
	for _, p := range s.Programs {
		if p.ID == id {
			tag, attach = p.Tag, p.AttachType
		}
	}
	if tag == "" || attach == "" {
		t.Fatalf("canary %d in the remote snapshot without tag or attach type (%q, %q)", id, tag, attach)
	}
	misses := func(sel string) (string, error) {
		out, err := exec.Command(bin, "misses", "--remote", "http://"+addr, "--token-file", tokenFile, "-o", "jsonl", sel).CombinedOutput()
		return string(out), err
	}
	for _, sel := range []string{"tag:" + tag, "attach:" + attach, "name:canary"} {
		out, err := misses(sel)
		if err != nil {
			t.Errorf("misses --remote %s: %v\n%s", sel, err, out)
			continue
		}
		first, _, _ := strings.Cut(out, "\n")
		var r struct{ Type string }
		if json.Unmarshal([]byte(first), &r) != nil || r.Type != recordWatcher {
			t.Errorf("misses --remote %s: first line %q, want the watcher's state", sel, first)
		}
	}
	if out, err := misses("attach:no_such_attach_type"); err == nil || !strings.Contains(out, "no program") {
		t.Errorf("misses --remote with a selector that picks nothing: %v, %q; want an error saying no program matches", err, out)
	}
}
