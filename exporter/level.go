package exporter

import "github.com/bpfleet/bpfleet/internal/config"

// Level is how much detail the exporter sends: config.MetricsLevel, the one
// level type, which internal/config parses from --metrics-level.
type Level = config.MetricsLevel

// The levels, named here for the metrics table and its tests.
const (
	LevelAttachType = config.LevelAttachType
	LevelOwner      = config.LevelOwner
	LevelWorkload   = config.LevelWorkload
	LevelProgram    = config.LevelProgram
)

// The levels of the metrics table's rows.
var (
	allLevels      = config.MetricsLevels
	ownerLevels    = []Level{LevelOwner}
	workloadLevels = []Level{LevelWorkload}
	programLevels  = []Level{LevelProgram}
)
