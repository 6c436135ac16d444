// Package config parses and validates every bpfleet command's settings —
// flags, OTEL_* environment variables and the files they name — before
// anything starts. Each command has a plain struct with typed enums; the
// command's flags bind to its fields, Resolve reads the environment, and
// Validate reports every problem at once (errors.Join), each as one line
// that names the flag or variable, the value and what is accepted. The
// packages that then run (agent, exporter, api) take the valid, typed
// result, refuse nothing themselves and read no environment (but
// $KUBECONFIG, which agent/kube reads to reach the Kubernetes API).
package config

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/apiconst"
)

// MinScanInterval is the shortest --interval the agent accepts. A
// steady-state scan of 1,000 programs costs about 4.3 ms of CPU
// (`go test ./agent -run X -bench 'Scan$'`: 4,300 ns/prog on the CI host);
// scanning every 500 ms keeps the agent under 1% of one CPU at that size,
// while --interval=1ns took 77% of a CPU and flooded the collector.
const MinScanInterval = 500 * time.Millisecond

// MinExportInterval bounds the metric export interval the same way: one
// export per scan at most is all the data there is, and a shorter interval
// only multiplies requests (and failure lines) against the collector.
const MinExportInterval = MinScanInterval

// MinToolInterval is the shortest refresh of the interactive tools (list
// --watch, top): a person watches them for minutes, not a node for months.
const MinToolInterval = 100 * time.Millisecond

// MinTokenLen is the shortest API bearer token accepted: anything shorter is
// guessable by a patient client on the node network.
const MinTokenLen = apiconst.MinTokenLen

// Problem is one invalid setting: the flag (--name) or variable (NAME), the
// value it had, and what is accepted.
type Problem struct {
	Name  string
	Value string
	Want  string
}

func (p *Problem) Error() string {
	return fmt.Sprintf("%s=%s: %s", p.Name, quote(p.Value), oneLine(p.Want))
}

// Quote shows a value as it was given, on one line, quoted only when it
// would otherwise be ambiguous (empty, spaces, control characters): for a
// Problem's Want that names a part of the value.
func Quote(v string) string { return quote(v) }

func quote(v string) string {
	if v == "" || strings.ContainsAny(v, " \t\r\n\"'\\,") || strings.ContainsFunc(v, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return fmt.Sprintf("%q", v)
	}
	return v
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

func problem(name, value, format string, args ...any) error {
	return &Problem{Name: name, Value: value, Want: fmt.Sprintf(format, args...)}
}

// usageError marks an error as the user's input (exit status 2), not a
// runtime failure (1).
type usageError struct{ error }

func (u usageError) Unwrap() error { return u.error }

// Usage marks err (a flag parse error, a wrong argument) as a usage error.
func Usage(err error) error {
	if err == nil {
		return nil
	}
	return usageError{err}
}

// IsUsage reports whether err, or any error joined into it, is a usage
// error: a Problem or an error marked with Usage.
func IsUsage(err error) bool {
	var p *Problem
	var u usageError
	return errors.As(err, &p) || errors.As(err, &u)
}

// Lookup reads one environment variable; os.LookupEnv in production, a map
// in tests.
type Lookup func(name string) (string, bool)

// Env is the process environment as a Lookup.
func Env(name string) (string, bool) { return os.LookupEnv(name) }

// MapEnv is a Lookup over a map, for tests and fuzzing.
func MapEnv(m map[string]string) Lookup {
	return func(name string) (string, bool) {
		v, ok := m[name]
		return v, ok
	}
}

// Scan is what every command that scans the kernel shares (agentFlags).
type Scan struct {
	ProcRoot   string
	BPFFS      []string
	NoOwners   bool
	NoIterator bool
	// ScanSource is auto, iterator or syscall (agent.ScanSource*).
	ScanSource     string
	QuietIntervals int
	// NoMaps skips reading the node's BPF maps; MapCountBound, above 0,
	// counts hash maps' elements by walking their keys where the kernel
	// cannot count them (before Linux 6.6).
	NoMaps        bool
	MapCountBound int
	// BPFFSSet says --bpffs was given: a missing default mount is only
	// "no pins to find", a missing mount the operator named is a mistake.
	BPFFSSet bool
	// CacheDir is where the iterators' CO-RE results are cached
	// (CacheDirFrom); "" for no cache.
	CacheDir string
}

// CacheDirEnv names the CO-RE cache directory. The chart sets it: the
// pod's root filesystem is read-only, so $HOME/.cache is no place for it.
const CacheDirEnv = "BPFLEET_CACHE_DIR"

// DefaultScan is the flags' defaults, with the cache directory from the
// process environment.
func DefaultScan() Scan {
	return Scan{ProcRoot: "/proc", BPFFS: []string{"/sys/fs/bpf"}, ScanSource: "auto", QuietIntervals: 2, CacheDir: CacheDirFrom(Env)}
}

// CacheDirFrom is the CO-RE cache directory: $BPFLEET_CACHE_DIR, else
// bpfleet in the user cache directory (/root/.cache/bpfleet for root), ""
// when neither is known. An unwritable one is no error here: loads still
// work, and the agent says so in its Degraded lines.
func CacheDirFrom(env Lookup) string {
	if d, _ := env(CacheDirEnv); d != "" {
		return d
	}
	d, err := os.UserCacheDir()
	if err != nil {
		return ""
	}
	return filepath.Join(d, "bpfleet")
}

// Validate checks that the mounts exist: a wrong path otherwise shows only
// inside the snapshots' scan messages, long after start.
func (s *Scan) Validate() error {
	var errs []error
	if err := checkProcRoot(s.ProcRoot); err != nil {
		errs = append(errs, err)
	}
	for _, p := range s.BPFFS {
		if p == "" {
			errs = append(errs, problem("--bpffs", p, "empty path: want a bpffs mount point such as /sys/fs/bpf"))
			continue
		}
		fi, err := os.Stat(p)
		switch {
		case err != nil && (s.BPFFSSet || !errors.Is(err, os.ErrNotExist)):
			errs = append(errs, problem("--bpffs", p, "%v: want an existing bpffs mount point", statReason(err)))
		case err == nil && !fi.IsDir():
			errs = append(errs, problem("--bpffs", p, "not a directory: want a bpffs mount point"))
		}
	}
	switch s.ScanSource {
	case "auto", "iterator", "syscall":
	default:
		errs = append(errs, problem("--scan-source", s.ScanSource, "want auto, iterator or syscall"))
	}
	if s.NoIterator && s.ScanSource == "iterator" {
		errs = append(errs, problem("--scan-source", s.ScanSource, "contradicts --no-iterator: drop one of them"))
	}
	if s.MapCountBound < 0 {
		errs = append(errs, problem("--map-count-bound", fmt.Sprint(s.MapCountBound), "want 0 (no key walks) or a bound on the keys walked per map"))
	}
	if s.QuietIntervals < 1 {
		errs = append(errs, problem("--quiet-intervals", fmt.Sprint(s.QuietIntervals), "want at least 1"))
	}
	return errors.Join(errs...)
}

func checkProcRoot(p string) error {
	const name = "--proc-root"
	if p == "" {
		return problem(name, p, "empty path: want where procfs is mounted, e.g. /proc")
	}
	var st unix.Statfs_t
	if err := unix.Statfs(p, &st); err != nil {
		return problem(name, p, "%v: want where procfs is mounted, e.g. /proc", statReason(err))
	}
	if st.Type != unix.PROC_SUPER_MAGIC {
		return problem(name, p, "not a procfs mount: want where procfs is mounted, e.g. /proc or /host/proc")
	}
	return nil
}

// statReason is a stat error without the path (the Problem names it).
func statReason(err error) string {
	var pe *os.PathError
	if errors.As(err, &pe) {
		err = pe.Err
	}
	if errors.Is(err, unix.ENOENT) {
		return "does not exist"
	}
	return err.Error()
}
