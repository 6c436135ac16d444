package ktest

import "os"

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
)

// present is what DESIGN.md's kernel matrix measured each entry to support
// (load, attach and runs counted). A feature listed here that the kernel
// refuses is a regression and fails the test instead of skipping it.
var present = map[string][]string{
	"bookworm-amd64": {FeatFentry, FeatFexit, FeatLSM, FeatTpBtf, FeatKprobe},
	"trixie-amd64":   {FeatFentry, FeatFexit, FeatFmodRet, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed},
	"sid-amd64":      {FeatFentry, FeatFexit, FeatFmodRet, FeatFentrySleep, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed},
	"sid-rt-amd64":   {FeatFentry, FeatFexit, FeatFmodRet, FeatFentrySleep, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed},
	"sid-arm64":      {FeatFentry, FeatFexit, FeatFmodRet, FeatFentrySleep, FeatLSM, FeatTpBtf, FeatKprobe, FeatKprobeMissed},
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
