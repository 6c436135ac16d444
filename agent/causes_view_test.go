package agent

import "testing"

func TestProgramCauses(t *testing.T) {
	n := func(v uint64) *uint64 { return &v }
	for _, tc := range []struct {
		name string
		p    ProgramStat
		want MissCauses
	}{
		{"no counter", ProgramStat{}, MissCauses{}},
		{"no watcher: all unexplained", ProgramStat{Program: Program{RecursionMisses: n(12)}}, MissCauses{Unexplained: 12}},
		{"watched", ProgramStat{Program: Program{RecursionMisses: n(12)}, MissCauses: &MissCauses{Recursion: 10, Preempted: 2}},
			MissCauses{Recursion: 10, Preempted: 2}},
		{"short: rest unexplained", ProgramStat{Program: Program{RecursionMisses: n(12)}, MissCauses: &MissCauses{Recursion: 10, Unexplained: 1}},
			MissCauses{Recursion: 10, Unexplained: 2}},
		{"over: cut", ProgramStat{Program: Program{RecursionMisses: n(5)}, MissCauses: &MissCauses{Recursion: 4, Nested: 3}},
			MissCauses{Recursion: 4, Nested: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := ProgramCauses(&tc.p)
			if got != tc.want {
				t.Fatalf("ProgramCauses = %+v, want %+v", got, tc.want)
			}
			if tc.p.RecursionMisses != nil && got.Sum() != *tc.p.RecursionMisses {
				t.Fatalf("sum %d != counter %d", got.Sum(), *tc.p.RecursionMisses)
			}
		})
	}
	p := ProgramStat{Delta: Rates{Misses: 7}, DeltaCauses: MissCauses{Interrupt: 3}}
	if got := IntervalCauses(&p); got != (MissCauses{Interrupt: 3, Unexplained: 4}) {
		t.Fatalf("IntervalCauses = %+v", got)
	}
}
