package progstats

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/bpfleet/bpfleet/internal/sysfile"
)

// PossibleCPUs returns how many CPUs the kernel can ever bring up: the
// kernel sums per-CPU statistics over every possible CPU (a CPU taken
// offline keeps its counts), so the iterator must too. It is read from
// /sys/devices/system/cpu/possible.
func PossibleCPUs() (int, error) {
	b, err := sysfile.Read("/sys/devices/system/cpu/possible") // no poller: see sysfile
	if err != nil {
		return 0, fmt.Errorf("reading possible CPUs: %w", err)
	}
	return parsePossible(string(b))
}

// parsePossible parses a CPU list such as "0-3" or "0,1-7" and returns its
// highest CPU + 1. The iterator walks CPUs 0..n-1, so a list with holes
// (a CPU id that is not possible below the highest one) is refused: the
// kernel would give that hole an offset of its own and the sum would be
// wrong.
func parsePossible(s string) (int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("empty possible CPU list")
	}
	next := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0, fmt.Errorf("possible CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil {
				return 0, fmt.Errorf("possible CPU list %q: %w", s, err)
			}
		}
		if a != next || b < a {
			return 0, fmt.Errorf("possible CPU list %q is not 0..n-1 without holes", s)
		}
		next = b + 1
	}
	return next, nil
}
