// Package expect says what each kernel-matrix entry was measured to
// support, so a test that meets a refusal fails where the feature is known
// present and skips (with the kernel's words) elsewhere. A leaf: probe
// packages' tests use it without importing the agent. Only tests import it,
// so it may import testing.
package expect

import (
	"errors"
	"os"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/features"

	"github.com/bpfleet/bpfleet/test/canary"
)

// EntryEnv names the kernel-matrix entry a test binary runs in; the harness's
// /init sets it. Unset (on the host) nothing is expected and every refusal
// is a skip with the kernel's reason.
const EntryEnv = "BPFLEET_KTEST_ENTRY"

// Features a kernel may refuse, named as the tests report them.
const (
	FeatFentry       = "fentry"
	FeatFexit        = "fexit"
	FeatFmodRet      = "fmod_ret"
	FeatFentrySleep  = "fentry.s"
	FeatLSM          = "lsm"
	FeatTpBtf        = "tp_btf"
	FeatKprobe       = "kprobe"
	FeatKprobeMissed = "kprobe missed" // skipped kprobe runs counted, link info carries missed (6.7+)
	// FeatProgStats: the iter/bpf_prog program that sums per-CPU
	// bpf_prog_stats (probes/progstats; bpf_map_lookup_percpu_elem, 5.19+).
	FeatProgStats = "bpf_prog stats iterator"
	// FeatLinkIter: the iter/bpf_link program that reads every link's
	// info (probes/linkstats; iter/bpf_link, 5.19+).
	FeatLinkIter = "bpf_link iterator"
	// FeatFentryOnBPF: fentry/fexit attached to another BPF program
	// (probes/profiler).
	FeatFentryOnBPF = "fentry on a BPF program"
	// FeatMapIter: the iter/bpf_map program that reads every map
	// (probes/mapstats; iter/bpf_map, 5.8+).
	FeatMapIter = "bpf_map iterator"
	// FeatMapCount: the kfunc bpf_map_sum_elem_count() the map iterator
	// counts hash-family elements with (6.6+).
	FeatMapCount = "bpf_map_sum_elem_count kfunc"
	// FeatRecursionGuard: the kernel turns a program's nested run away and
	// counts it in bpf_prog_info.recursion_misses (canary.RecursionGuard).
	// Without it the recursion scenarios overflow the kernel stack or
	// deadlock, so they are not run.
	FeatRecursionGuard = "per-program recursion guard"
)

// present is what the kernel matrix measured each entry to support (load,
// attach and runs counted; ARCHITECTURE.md, "What the Debian kernels in
// qemu allow"). A feature listed here that the kernel refuses is a
// regression and fails the test instead of skipping it.
var present = map[string][]string{
	"bookworm-amd64": {FeatFentry, FeatFexit, FeatLSM, FeatTpBtf, FeatKprobe, FeatProgStats, FeatFentryOnBPF, FeatLinkIter, FeatMapIter, FeatMissWatch, FeatProgRanges},
	"trixie-amd64":   {FeatFentry, FeatFexit, FeatFmodRet, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed, FeatProgStats, FeatLinkIter, FeatMapIter, FeatMapCount, FeatMissWatch, FeatMissWatchKprobe, FeatProgRanges},
	"sid-amd64":      {FeatFentry, FeatFexit, FeatFmodRet, FeatFentrySleep, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed, FeatProgStats, FeatFentryOnBPF, FeatLinkIter, FeatMapIter, FeatMapCount, FeatMissWatch, FeatMissWatchKprobe, FeatProgRanges},
	"sid-rt-amd64":   {FeatFentry, FeatFexit, FeatFmodRet, FeatFentrySleep, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed, FeatProgStats, FeatFentryOnBPF, FeatLinkIter, FeatMapIter, FeatMapCount, FeatMissWatch, FeatMissWatchKprobe, FeatProgRanges},
	"sid-arm64":      {FeatFentry, FeatFexit, FeatFmodRet, FeatFentrySleep, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed, FeatProgStats, FeatFentryOnBPF, FeatLinkIter, FeatMapIter, FeatMapCount, FeatMissWatch, FeatProgRanges},
	// Measured 2026-12-06 on 5.10.223: the kprobe and map
	// iterator tests load and run; 2026-12-07: fentry and fexit too, once
	// the bpf_loop program had an object of its own (ktestloop: the 5.10
	// verifier refuses every program of an object with a loop callback,
	// "number of funcs in func_info doesn't match number of subprogs").
	// The profiler's refusal is still bpf_loop's, in its targets.
	"bullseye-amd64": {FeatKprobe, FeatMapIter, FeatFentry, FeatFexit, FeatProgRanges},
}

// Entry is the matrix entry this binary runs in, "" outside the matrix.
func Entry() string { return os.Getenv(EntryEnv) }

// Expected says whether the current entry must support feature.
func Expected(feature string) bool {
	for _, f := range present[Entry()] {
		if f == feature {
			return true
		}
	}
	return false
}

// SkipUnlessExpected ends a test whose feature the kernel refused (err
// carries the kernel's or the agent's answer): a failure where the matrix
// measured the feature present on this entry, since that is a regression,
// else a skip that says why. Every refusal in the kernel tests goes through
// here so the matrix's logs word them alike.
func SkipUnlessExpected(t testing.TB, feature string, err error) {
	t.Helper()
	if Expected(feature) {
		t.Fatalf("%s refused on %s, where it was measured present: %v", feature, Entry(), err)
	}
	t.Skipf("%s not available on this kernel: %v", feature, err)
}

// SkipLoadUnlessExpected ends a test whose BPF object, which has a
// bpf_loop callback, the kernel refused: a skip with both answers where the
// kernel has no bpf_loop helper (asked of it; 5.17+), since a verifier
// without it refuses every program of such an object whatever its attach
// type ("number of funcs in func_info doesn't match number of subprogs" on
// 5.10); else as SkipUnlessExpected for feature.
func SkipLoadUnlessExpected(t testing.TB, feature string, err error) {
	t.Helper()
	if lerr := features.HaveProgramHelper(ebpf.SocketFilter, asm.FnLoop); lerr != nil {
		t.Skipf("the object has a bpf_loop callback and this kernel has no bpf_loop (%v): %v", lerr, err)
	}
	SkipUnlessExpected(t, feature, err)
}

// FeatProgRanges: the iter/bpf_prog program that reads each program's
// JIT ranges from the kernel's structures where kernel addresses are
// hidden (probes/misswatch, ranges.bpf.c).
const FeatProgRanges = "bpf_prog ranges iterator"

// FeatMissWatch: a hardware watchpoint (perf_event_open,
// PERF_TYPE_BREAKPOINT) on a program's per-CPU miss counter, sampling the
// kernel stack of each miss (probes/misswatch).
const FeatMissWatch = "miss watchpoint"

// FeatMissWatchKprobe: the watchpoint fires for a miss counted inside a
// kprobe handler. Measured 2026-12-05: yes on amd64 (6.12, 7.2, 7.2 RT);
// no on arm64 7.2, which runs kprobes as debug exceptions (BRK), inside
// which watchpoints do not fire.
const FeatMissWatchKprobe = "miss watchpoint in a kprobe handler"

// FeatFsessionOnBPF: a BPF_TRACE_FSESSION program attached to another BPF
// program (probes/profiler's session shape).
const FeatFsessionOnBPF = "fsession on a BPF program"

// CanaryFeature is the feature err, a refusal to load the recursion canary
// (test/canary's Load), is about: the recursion guard where the kernel has
// none, else tp_btf on bpf_trace_printk.
func CanaryFeature(err error) string {
	if errors.Is(err, canary.ErrNoRecursionGuard) {
		return FeatRecursionGuard
	}
	return FeatTpBtf
}

func init() {
	// The guard: recursion_misses in each of these kernels' BTF, and their
	// recursion scenarios pass (bullseye's 5.10 has neither).
	for _, e := range []string{"bookworm-amd64", "trixie-amd64", "sid-amd64", "sid-rt-amd64", "sid-arm64"} {
		present[e] = append(present[e], FeatRecursionGuard)
	}
	// Measured 2026-12-03 (probes/profiler, test/kernels/ktest's agent
	// profile tests): fsession on a BPF program in the three 7.2 entries,
	// fentry/fexit on one in trixie (6.12) too.
	for _, e := range []string{"sid-amd64", "sid-rt-amd64", "sid-arm64"} {
		present[e] = append(present[e], FeatFsessionOnBPF)
	}
	present["trixie-amd64"] = append(present["trixie-amd64"], FeatFentryOnBPF)
	// Measured 2026-12-07 (probes/mappressure): the eviction and
	// refused-update counters load, attach (every refusal target) and give
	// the known answers on every entry, 5.10 included.
	for _, e := range []string{"bookworm-amd64", "trixie-amd64", "sid-amd64", "sid-rt-amd64", "sid-arm64", "bullseye-amd64"} {
		present[e] = append(present[e], FeatMapEvictions, FeatMapRefusals)
	}
	// bpf_loop (5.17): every entry but bullseye's 5.10.
	for _, e := range []string{"bookworm-amd64", "trixie-amd64", "sid-amd64", "sid-rt-amd64", "sid-arm64"} {
		present[e] = append(present[e], FeatLoop)
	}
}

// FeatMapEvictions: the fexit program on htab_lru_map_delete_node that
// counts each LRU hash map's evictions (probes/mappressure).
const FeatMapEvictions = "LRU eviction counter"

// FeatMapRefusals: the fexit programs on the hash family's update
// functions that count each map's refused updates (probes/mappressure).
const FeatMapRefusals = "refused-update counter"

// FeatLoop: the bpf_loop helper (Linux 5.17), which the interrupt
// scenario's spinning program calls (test/kernels/ktest's ktestloop object).
const FeatLoop = "bpf_loop helper"
