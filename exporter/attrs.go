package exporter

import (
	"slices"

	"github.com/bpfleet/bpfleet/internal/config"
)

// Attribute keys: every key the exporter writes on a data point, a span or
// the resource, named once here and used everywhere in exporter/ (the
// metrics table's attribute lists, the view, the workload keys, spans,
// the resource). Prometheus sees them with "." as "_" (k8s_pod_name).
const (
	// The program.
	attrProgramID        = "bpf.program.id"
	attrProgramName      = "bpf.program.name"
	attrProgramTag       = "bpf.program.tag"
	attrProgramType      = "bpf.program.type"
	attrProgramSleepable = "bpf.program.sleepable"
	attrAttachType       = "bpf.attach.type"
	attrAttachTarget     = "bpf.attach.target"
	attrMissKind         = "bpf.miss.kind"
	// attrMissCause is a miss counter's cause (agent.Causes, a closed
	// set); on an episode span the dominant cause, beside one
	// bpf.miss.cause.<cause> count per cause (attrMissCause + "." + cause).
	attrMissCause = "bpf.miss.cause"
	attrLinkID    = "bpf.link.id"
	attrLinkType  = "bpf.link.type"
	// attrLinkMissReason is why a kprobe link missed (agent.LinkMissReasons):
	// nesting, maxactive or unknown.
	attrLinkMissReason = "bpf.link.miss.reason"

	// A map, and what a memory figure counts.
	attrMapID      = "bpf.map.id"
	attrMapName    = "bpf.map.name"
	attrMapType    = "bpf.map.type"
	attrMemoryKind = "bpf.memory.kind"

	// Its owner.
	attrOwnerKey              = "bpf.owner.key"
	attrProcessPID            = "process.pid"
	attrProcessExecutableName = "process.executable.name"
	attrContainerID           = "container.id"
	attrK8sPodName            = "k8s.pod.name"
	attrK8sNamespaceName      = "k8s.namespace.name"
	attrK8sWorkloadKind       = "k8s.workload.kind"
	attrK8sWorkloadName       = "k8s.workload.name"

	// The agent's own metrics.
	attrScanSource         = "bpf.scan.source"
	attrScanFallbackReason = "bpf.scan.fallback_reason"
	attrStatsMode          = "bpf.stats.mode"
	attrStatsKind          = "bpf.stats.kind"
	attrSignal             = "signal"

	// Miss-episode spans and their events.
	attrEpisodeSource    = "bpf.episode.source"
	attrEpisodeMisses    = "bpf.episode.misses"
	attrEpisodeRuns      = "bpf.episode.runs"
	attrEpisodeMissRatio = "bpf.episode.miss_ratio"
	attrEpisodePeakRate  = "bpf.episode.peak_rate"
	attrEpisodeRate      = "bpf.episode.rate"
	attrEpisodeIntervals = "bpf.episode.intervals"
	attrEpisodeTruncated = "bpf.episode.truncated"
	attrEpisodeEndedBy   = "bpf.episode.ended_by"
	// An episode's sampled misses: by context, the stacks' and tasks'
	// span events.
	attrMissContext = "bpf.miss.context"
	attrMissStack   = "bpf.miss.stack"

	// The resource.
	attrServiceName       = "service.name"
	attrServiceInstanceID = "service.instance.id"
	attrHostName          = "host.name"
	attrHostArch          = "host.arch"
	attrHostCPUModelName  = "host.cpu.model.name"
	attrOSType            = "os.type"
	attrOSVersion         = "os.version"
	attrKernelPreempt     = "bpf.kernel.preempt"
	attrK8sNodeName       = "k8s.node.name"
	attrK8sClusterName    = "k8s.cluster.name"
	attrK8sNodePoolName   = config.NodePoolAttr
)

// Attribute lists of the metrics table's rows, named once so the doc and
// the code cannot disagree.
var (
	// identityAttrs name a program (identityKVs).
	identityAttrs = []string{
		attrProgramID, attrProgramName, attrProgramTag, attrProgramType,
		attrAttachType, attrAttachTarget, attrProgramSleepable,
	}
	programAttrs = []string{
		attrProgramID, attrProgramName, attrProgramTag, attrProgramType,
		attrAttachType, attrAttachTarget, attrProgramSleepable, attrMissKind,
		attrProcessPID, attrProcessExecutableName, attrContainerID, attrK8sPodName, attrK8sNamespaceName,
		attrK8sWorkloadKind, attrK8sWorkloadName,
	}
	linkAttrs = append([]string{attrLinkID, attrLinkType, attrLinkMissReason}, programAttrs...)
	// programMissAttrs: the program's misses by cause.
	programMissAttrs = append(slices.Clip(programAttrs), attrMissCause)
	// workloadAttrs stay the same when a program is reloaded (new id, new
	// pod, new pid): the key of the workload level's series.
	workloadAttrs = []string{
		attrProgramName, attrProgramType, attrAttachType, attrAttachTarget, attrMissKind,
		attrK8sNamespaceName, attrK8sWorkloadKind, attrK8sWorkloadName, attrProcessExecutableName,
	}
	// workloadLinkAttrs key the workload level's bpf.link.missed: the
	// key and why the links missed.
	workloadLinkAttrs = append(append([]string{}, workloadAttrs...), attrLinkMissReason)
	// infoAttrs join a program's identity to its workload series.
	infoAttrs         = append([]string{attrProgramID, attrProgramTag, attrProcessPID, attrContainerID, attrK8sPodName}, workloadAttrs...)
	workloadMissAttrs = append(slices.Clip(workloadAttrs), attrMissCause)
	ownerAttrs        = []string{attrOwnerKey, attrProcessPID, attrProcessExecutableName, attrContainerID, attrK8sPodName, attrK8sNamespaceName}
	ownerMissAttrs    = append(slices.Clip(ownerAttrs), attrMissCause)
	// mapWorkloadAttrs key a map at the workload level: what survives a
	// reload (the map's name and type, the workload of the programs that
	// use it); mapAttrs add its id at the program level.
	mapWorkloadAttrs = []string{
		attrMapName, attrMapType,
		attrK8sNamespaceName, attrK8sWorkloadKind, attrK8sWorkloadName, attrProcessExecutableName,
	}
	mapAttrs         = append([]string{attrMapID}, mapWorkloadAttrs...)
	programMemAttrs  = append([]string{attrMemoryKind}, programAttrs...)
	workloadMemAttrs = append([]string{attrMemoryKind}, workloadAttrs...)
	ownerMemAttrs    = append([]string{attrMemoryKind}, ownerAttrs...)
	memoryKindAttrs  = []string{attrMemoryKind}
	attachAttrs      = []string{attrAttachType}
	attachMissAttrs  = []string{attrAttachType, attrMissCause}
	exportAttrs      = []string{attrSignal}
	scanAttrs        = []string{attrScanSource, attrScanFallbackReason}
	statsModeAttrs   = []string{attrStatsMode}
	programTypeAttrs = []string{attrProgramType}
	statsKindAttrs   = []string{attrStatsKind}
	noAttrs          = []string(nil)
)
