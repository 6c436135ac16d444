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

func TestShortCausesAndSelect(t *testing.T) {
	if got := ShortCauses(MissCauses{Recursion: 10, Preempted: 2, Unexplained: 9}); got != "r10 p2" {
		t.Errorf("ShortCauses = %q, want \"r10 p2\"", got)
	}
	if got := ShortCauses(MissCauses{Unexplained: 9}); got != "" {
		t.Errorf("ShortCauses of unexplained only = %q, want \"\"", got)
	}
	progs := []*ProgramStat{{Program: Program{ID: 7, Name: "canary"}}, {Program: Program{ID: 8, Name: "other"}}, {Program: Program{ID: 9, Name: "canary"}}}
	if got := SelectPrograms([]string{"canary"}, progs); len(got) != 2 || got[0] != 7 || got[1] != 9 {
		t.Errorf("SelectPrograms(canary) = %v, want [7 9]", got)
	}
	if got := SelectPrograms([]string{"8"}, progs); len(got) != 1 || got[0] != 8 {
		t.Errorf("SelectPrograms(8) = %v, want [8]", got)
	}
}
