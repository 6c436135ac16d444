package config

import "fmt"

// MetricsLevel is how much detail the exporter sends (--metrics-level):
// the operator's cardinality choice (a 10k-node fleet with 200 programs
// per node needs attach-type). The one level type: the exporter's Level is
// this.
type MetricsLevel int

// The metrics levels, least detail first.
const (
	// LevelAttachType exports per-attach-type aggregates and agent health.
	LevelAttachType MetricsLevel = iota
	// LevelOwner adds per-owner (process / container / pod) aggregates.
	LevelOwner
	// LevelWorkload exports program metrics keyed by what survives a
	// reload or a pod restart (name, type, attach type and target class,
	// miss kind, owning workload or executable): the series count does
	// not grow with reloads. The default.
	LevelWorkload
	// LevelProgram exports every program (up to --max-programs) and link
	// with its identity (id, tag, pid, pod, container): for one node and
	// debugging, as every reload makes new series.
	LevelProgram
)

// MetricsLevels are the levels, least detail first.
var MetricsLevels = []MetricsLevel{LevelAttachType, LevelOwner, LevelWorkload, LevelProgram}

func (l MetricsLevel) String() string {
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

// ParseMetricsLevel parses the --metrics-level value: the one place a
// level's name becomes a level.
func ParseMetricsLevel(s string) (MetricsLevel, error) {
	for _, l := range MetricsLevels {
		if s == l.String() {
			return l, nil
		}
	}
	return 0, fmt.Errorf("metrics level %q: %s", s, levelWant)
}

const levelWant = "want workload, program, owner or attach-type"
