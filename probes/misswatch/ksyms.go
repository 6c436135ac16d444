package misswatch

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"slices"
	"strconv"
)

// maxSymSpan bounds how far past a symbol's address an address may lie and
// still be named by it: kallsyms gives no sizes, and an address past the
// last symbol of a region (module, BPF, or unknown memory) must not be
// named after whatever symbol precedes it.
const maxSymSpan = 1 << 20

// Symbols names kernel addresses from /proc/kallsyms. It keeps only the
// names it was asked for: a miss-free node never reads kallsyms, and a
// stack's new addresses cost one pass over the file (~120k lines), not a
// table of every kernel symbol in the agent's memory.
type Symbols struct {
	path  string
	names map[uint64]string // "" for an address no symbol names
	// Err says why addresses cannot be named (kallsyms unreadable, or
	// all its addresses zero: kptr_restrict without CAP_SYSLOG).
	Err error
}

// maxNames bounds the cache: past it, it starts over.
const maxNames = 8192

// NewSymbols names addresses from the kallsyms file at path.
func NewSymbols(path string) *Symbols {
	return &Symbols{path: path, names: map[uint64]string{}}
}

// Name returns "symbol+0xoff" for an address Resolve saw, or "" when no
// symbol names it.
func (s *Symbols) Name(addr uint64) string { return s.names[addr] }

// Check reads kallsyms up to its first non-zero address, so that Err says
// from the start whether frames can be named, before any miss: where the
// kernel hides its addresses every line reads zero (kptr_restrict=2, or no
// CAP_SYSLOG with perf_event_paranoid >= 2) and the file is read through
// once. It returns Err.
func (s *Symbols) Check() error {
	if s.Err != nil {
		return s.Err
	}
	f, err := os.Open(s.path)
	if err != nil {
		s.Err = fmt.Errorf("reading kernel symbols: %w", err)
		return s.Err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		if a, _, ok := symLine(sc.Bytes()); ok && a != 0 {
			return nil
		}
	}
	if err := sc.Err(); err != nil {
		s.Err = fmt.Errorf("reading kernel symbols: %w", err)
		return s.Err
	}
	s.Err = s.zeroErr()
	return s.Err
}

func (s *Symbols) zeroErr() error {
	return fmt.Errorf("%s shows no addresses (kptr_restrict: the agent needs CAP_SYSLOG to name kernel frames)", s.path)
}

// symLine splits a kallsyms line into its address and what follows the
// type letter.
func symLine(line []byte) (uint64, []byte, bool) {
	sp := bytes.IndexByte(line, ' ')
	if sp <= 0 || len(line) < sp+3 {
		return 0, nil, false
	}
	a, err := strconv.ParseUint(string(line[:sp]), 16, 64)
	if err != nil {
		return 0, nil, false
	}
	return a, line[sp+3:], true
}

// What names a sampled stack's frames (the watcher's `symbols:`).
const (
	// SymbolsKallsyms: kernel symbols, and the program's own frames.
	SymbolsKallsyms = "kallsyms"
	// SymbolsRangesOnly: only the program's own frames, from its JIT
	// ranges; kernel frames are bare addresses, so interrupt entries are
	// not seen.
	SymbolsRangesOnly = "program ranges only"
	// SymbolsNone: neither; every miss is unexplained.
	SymbolsNone = "none"
)

// SymbolSource says what really names frames: kallsyms where it shows
// addresses (kallsymsErr nil), else the programs' JIT ranges where a
// source shows them, else nothing.
func SymbolSource(kallsymsErr error, rangesShown bool) string {
	switch {
	case kallsymsErr == nil:
		return SymbolsKallsyms
	case rangesShown:
		return SymbolsRangesOnly
	}
	return SymbolsNone
}

// Resolve names every address not named yet, in one pass over kallsyms.
func (s *Symbols) Resolve(addrs []uint64) {
	var want []uint64
	for _, a := range addrs {
		if _, ok := s.names[a]; !ok {
			want = append(want, a)
		}
	}
	if len(want) == 0 || s.Err != nil {
		return
	}
	if len(s.names)+len(want) > maxNames {
		clear(s.names)
	}
	slices.Sort(want)
	want = slices.Compact(want)
	best := make([]uint64, len(want))
	names := make([]string, len(want))
	f, err := os.Open(s.path)
	if err != nil {
		s.Err = fmt.Errorf("reading kernel symbols: %w", err)
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	nonzero := false
	for sc.Scan() {
		a, rest, ok := symLine(sc.Bytes())
		if !ok || a == 0 {
			continue
		}
		nonzero = true
		// Every wanted address at or above a: this symbol names it if it
		// is the closest below it so far.
		i, _ := slices.BinarySearch(want, a)
		for j := i; j < len(want) && want[j]-a < maxSymSpan; j++ {
			if a >= best[j] {
				best[j] = a
				names[j] = symName(rest)
			}
		}
	}
	if err := sc.Err(); err != nil {
		s.Err = fmt.Errorf("reading kernel symbols: %w", err)
		return
	}
	if !nonzero {
		s.Err = s.zeroErr()
		return
	}
	for j, a := range want {
		if names[j] == "" {
			s.names[a] = ""
			continue
		}
		s.names[a] = fmt.Sprintf("%s+0x%x", names[j], a-best[j])
	}
}

// symName is a kallsyms name without its module suffix's tab ("name\t[mod]"
// keeps the module in brackets after a space).
func symName(b []byte) string {
	if i := bytes.IndexByte(b, '\t'); i >= 0 {
		return string(b[:i]) + " " + string(bytes.TrimSpace(b[i+1:]))
	}
	return string(b)
}

// BaseName is a Name without its offset and module: "symbol".
func BaseName(name string) string {
	if i := bytes.IndexByte([]byte(name), '+'); i >= 0 {
		return name[:i]
	}
	return name
}
