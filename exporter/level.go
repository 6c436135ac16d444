package exporter

import "fmt"

// Level is how much detail the exporter sends: the operator's cardinality
// choice (a 10k-node fleet with 200 programs per node needs attach-type).
type Level int

const (
	// LevelAttachType exports per-attach-type aggregates and agent health.
	LevelAttachType Level = iota
	// LevelOwner adds per-owner (process / container / pod) aggregates.
	LevelOwner
	// LevelWorkload exports program metrics keyed by what survives a
	// reload or a pod restart (name, type, attach type and target class,
	// miss kind, owning workload or executable: stableDoc): the series
	// count does not grow with reloads. The default.
	LevelWorkload
	// LevelProgram exports every program (up to MaxPrograms) and link with
	// its identity (id, tag, pid, pod, container): for one node and
	// debugging, as every reload makes new series.
	LevelProgram
)

func (l Level) String() string {
	switch l {
	case LevelAttachType:
		return "attach-type"
	case LevelOwner:
		return "owner"
	case LevelWorkload:
		return "workload"
	case LevelProgram:
		return "program"
	}
	return fmt.Sprintf("Level(%d)", int(l))
}

// ParseLevel parses the --metrics-level value.
func ParseLevel(s string) (Level, error) {
	for _, l := range allLevels {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("metrics level %q: want workload, program, owner or attach-type", s)
}

// The levels of the metrics table's rows.
var (
	allLevels      = []Level{LevelAttachType, LevelOwner, LevelWorkload, LevelProgram}
	ownerLevels    = []Level{LevelOwner}
	workloadLevels = []Level{LevelWorkload}
	programLevels  = []Level{LevelProgram}
)
