package agent

import "github.com/bpfleet/bpfleet/agent/internal/prog"

// ProgramCauses is p's recursion_misses by cause, cumulative: its
// MissCauses, or, where the watcher filled none (absent on this node, or
// nothing of the program explained yet), every miss unexplained. Zero without
// recursion_misses. The causes add up to *p.RecursionMisses: a MissCauses
// that does not (it cannot, by contract) has the difference put in
// unexplained, or unexplained cut, so that every consumer's sum over causes
// is the kernel's counter.
func ProgramCauses(p *ProgramStat) MissCauses {
	if p.RecursionMisses == nil {
		return MissCauses{}
	}
	total := *p.RecursionMisses
	if p.MissCauses == nil {
		return MissCauses{Unexplained: total}
	}
	return FitCauses(*p.MissCauses, total)
}

// IntervalCauses is p's Delta.Misses by cause: DeltaCauses, fitted to
// Delta.Misses as ProgramCauses fits the cumulative ones (all unexplained
// where the watcher explained none).
func IntervalCauses(p *ProgramStat) MissCauses {
	return FitCauses(p.DeltaCauses, p.Delta.Misses)
}

// FitCauses makes c add up to total through its unexplained count: the
// explained causes are kept (cut in Causes order if they alone exceed
// total), and unexplained is the rest. An aggregate's interval (an attach
// type's, an owner's Delta.Misses) is fitted to its programs' explained
// causes so.
func FitCauses(c MissCauses, total uint64) MissCauses {
	c.Unexplained = 0
	if c.Sum() <= total {
		c.Unexplained = total - c.Sum()
		return c
	}
	c.FitExplained(total)
	return c
}

// Explained says whether any miss in c has a measured cause.
func Explained(c MissCauses) bool { return c.Explained() > 0 }

// SelectPrograms returns the ids of the programs sels pick, as Config.Profile
// selects programs (id:N, name:S, tag:S, attach:S, owner:S, or a bare word
// matching any of them): `bpfleet misses PROG...` watches them
// (Config.WatchPrograms).
func SelectPrograms(sels []string, progs []*ProgramStat) []uint32 {
	var ids []uint32
	for _, p := range progs {
		if profileMatch(sels, &p.Program) {
			ids = append(ids, p.ID)
		}
	}
	return ids
}

// ShortCauses is c in a few characters for a table cell: the explained
// causes' initials and counts (ShortCausesLegend), "" where nothing was
// explained: "r10 p2".
func ShortCauses(c MissCauses) string { return c.Short() }

// ShortCausesLegend says what ShortCauses' initials stand for.
func ShortCausesLegend() string { return prog.ShortLegend() }
