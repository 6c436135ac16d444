package stats

import (
	"slices"
	"sort"
	"time"
	"unsafe"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
)

// TaxShape is the part of the stats tax that depends on which programs
// there are, not on their rates: the costs by kind, and per program type
// the programs that have a cost and where it comes from.
type TaxShape struct {
	costs     *StatsCost // the costs slice it was built from
	ncosts    int
	byKind    map[string]float64
	elsewhere bool
	types     []ProgramTypeTax // sorted by type; Programs and Source only
	idx       map[string]int
	order     []int // types' indices in the order programs first showed them
}

// NewTaxShape builds the shape of costs, before any program is counted.
func NewTaxShape(costs []StatsCost) *TaxShape {
	sh := &TaxShape{costs: unsafe.SliceData(costs), ncosts: len(costs), byKind: map[string]float64{}}
	for _, c := range costs {
		if c.Measured {
			sh.byKind[c.Kind] = c.TaxNs
		} else if len(c.Reason) >= len("not measurable") && c.Reason[:len("not measurable")] == "not measurable" {
			sh.elsewhere = true
		}
	}
	return sh
}

// SameCosts says the shape was built from this very costs slice (the agent
// replaces it, never writes it).
func (sh *TaxShape) SameCosts(costs []StatsCost) bool {
	return sh.costs == unsafe.SliceData(costs) && sh.ncosts == len(costs)
}

// Count counts the programs of each type that have a cost.
func (sh *TaxShape) Count(progs []*prog.ProgramStat) {
	sh.types, sh.order = sh.types[:0], sh.order[:0]
	sh.idx = map[string]int{}
	for _, p := range progs {
		_, src, ok := costFor(&p.Program, sh.byKind)
		if !ok {
			continue
		}
		j, seen := sh.idx[p.Type]
		if !seen {
			j = len(sh.types)
			sh.idx[p.Type] = j
			sh.types = append(sh.types, ProgramTypeTax{ProgramType: p.Type, Source: src})
		}
		t := &sh.types[j]
		t.Programs++
		if t.Source != src {
			t.Source = "mixed"
		}
	}
	// Sorted as the result is; order keeps the first-seen order, in which
	// the total is summed (float sums depend on their order).
	first := make([]string, len(sh.types))
	for i := range sh.types {
		first[i] = sh.types[i].ProgramType
	}
	sort.Slice(sh.types, func(a, b int) bool { return sh.types[a].ProgramType < sh.types[b].ProgramType })
	for i := range sh.types {
		sh.idx[sh.types[i].ProgramType] = i
	}
	for _, name := range first {
		sh.order = append(sh.order, sh.idx[name])
	}
}

// Rates fills tax's per-type figures from the interval rates of progs
// (every program with a rate, in program order).
func (sh *TaxShape) Rates(tax *StatsTax, progs []*prog.ProgramStat) {
	if len(sh.types) == 0 {
		return
	}
	tax.ByProgramType = slices.Clone(sh.types)
	weighted := make([]float64, len(sh.types))
	for _, p := range progs {
		rate := p.Delta.RunsPerSec
		ns, _, ok := costFor(&p.Program, sh.byKind)
		if !ok {
			continue
		}
		j := sh.idx[p.Type]
		t := &tax.ByProgramType[j]
		t.RunsPerSec += rate
		t.AlwaysCPUShare += rate * ns / 1e9
		weighted[j] += rate * ns
	}
	for _, j := range sh.order {
		t := &tax.ByProgramType[j]
		if t.RunsPerSec > 0 {
			t.CostNs = weighted[j] / t.RunsPerSec
		}
		t.CPUShare = t.AlwaysCPUShare * tax.Duty
		tax.AlwaysCPUShare += t.AlwaysCPUShare
	}
	tax.CPUShare = tax.AlwaysCPUShare * tax.Duty
}

// Head is taxHead with this shape's costs: the tax's figures that do not
// depend on the programs, and whether they are the whole tax.
func (sh *TaxShape) Head(st StatsState, dt time.Duration) (StatsTax, bool) {
	return taxHead(st, sh.byKind, sh.elsewhere, dt)
}
