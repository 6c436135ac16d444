package main

import (
	"os"
	"os/exec"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/agent"
)

// warmCacheCmd is the hidden command a one-shot list starts, detached, when
// it found the CO-RE cache cold (no agent ever ran on the node): it writes
// the cache so that every later list loads its iterators from it.
const warmCacheCmd = "__warm-core-cache"

func init() {
	rootCmd.AddCommand(&cobra.Command{
		Use:    warmCacheCmd + " DIR",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(_ *cobra.Command, args []string) error {
			return agent.WarmOneShotCache(args[0])
		},
	})
}

// warmCacheAfter starts warmCacheCmd for dir in the background where dir
// lacks what a one-shot list loads from it, after the list's output is
// written. Relocating from kernel BTF costs tens of ms of CPU, more than a
// cold list itself (docs/performance.md, "bpfleet list -o json with
// owners"): in its own session, not waited for, it leaves this list's time
// as it was. It is best effort: where it cannot start or write, the next
// list reads by syscall as this one did.
func warmCacheAfter(dir string) {
	if dir == "" || !agent.OneShotCacheCold(dir) {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		return
	}
	cmd := exec.Command(exe, warmCacheCmd, dir)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if cmd.Start() == nil {
		cmd.Process.Release()
	}
}
