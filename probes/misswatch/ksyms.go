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
		line := sc.Bytes()
		sp := bytes.IndexByte(line, ' ')
		if sp <= 0 || len(line) < sp+3 {
			continue
		}
		a, err := strconv.ParseUint(string(line[:sp]), 16, 64)
		if err != nil || a == 0 {
			continue
		}
		nonzero = true
		// Every wanted address at or above a: this symbol names it if it
		// is the closest below it so far.
		i, _ := slices.BinarySearch(want, a)
		for j := i; j < len(want) && want[j]-a < maxSymSpan; j++ {
			if a >= best[j] {
				best[j] = a
				names[j] = symName(line[sp+3:])
			}
		}
	}
	if err := sc.Err(); err != nil {
		s.Err = fmt.Errorf("reading kernel symbols: %w", err)
		return
	}
	if !nonzero {
		s.Err = fmt.Errorf("%s shows no addresses (kptr_restrict: the agent needs CAP_SYSLOG to name kernel frames)", s.path)
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
