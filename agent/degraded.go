package agent

import (
	"fmt"
	"strings"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/internal/sysfile"
)

// Features the agent may lose on a node, as Degraded lines name them
// ("<feature>: <why>"): a missing privilege (the chart's pod without a
// capability or a host mount), a kernel without the facility, or a
// refusal. Tests match lost features by these names.
const (
	FeatureCapabilities  = "capabilities"
	FeatureStats         = "stats"
	FeatureProgIterator  = "program iterator"
	FeatureLinkIterator  = "link iterator"
	FeatureSteadyRead    = "steady read"
	FeatureFacts         = "facts iterator"
	FeatureOwnerIterator = "owner iterator"
	FeatureOwners        = "owners"
	FeaturePins          = "pins"
	FeatureCgroupAttach  = "cgroup attachments"
	FeatureCgroupLinks   = "cgroup link targets"
	FeatureNetdevAttach  = "interface attachments"
	FeatureNetdevNames   = "interface names"
	FeatureNetdevPods    = "interface pods"
	FeatureCalibration   = "calibration"
	FeatureMapIterator   = "map iterator"
	FeatureMaps          = "maps"
	FeatureMissWatch     = "miss watch"
	FeatureMissSymbols   = "miss stack symbols"
	FeatureMissRanges    = "miss program ranges"
	FeatureCoreCache     = "CO-RE cache"
	FeatureMisses        = "recursion misses"
)

// usedCaps are the capabilities the agent uses beyond the ones without
// which it cannot start at all (CAP_SYS_ADMIN: BPF_PROG_GET_NEXT_ID and
// GET_FD_BY_ID; it implies CAP_BPF and CAP_PERFMON), with what a node
// loses without each. Bit numbers from linux/capability.h.
var usedCaps = []struct {
	bit  uint
	name string
	loss string
}{
	{19, "CAP_SYS_PTRACE", "owners held by other users' or more privileged processes are unreadable (/proc/PID/fdinfo is a ptrace-mode check)"},
	{2, "CAP_DAC_READ_SEARCH", "/proc/PID/fd of other users' processes, bpffs and cgroupfs directories they own cannot be walked"},
}

// netnsAdvice is what to do when the host's network namespace (the
// interfaces' one, entered through /proc/1/ns/net) cannot be read.
const netnsAdvice = "; the agent needs CAP_SYS_ADMIN, the host's PID namespace and a security profile (AppArmor, SELinux) that allows setns"

// missingCaps reads the agent's own effective capabilities and names the
// used ones it lacks, "" when it has them all or cannot tell.
func missingCaps() string {
	b, err := sysfile.Read("/proc/self/status")
	if err != nil {
		return ""
	}
	eff, ok := capEff(string(b))
	if !ok {
		return ""
	}
	var miss []string
	for _, c := range usedCaps {
		if eff&(1<<c.bit) == 0 {
			miss = append(miss, "no "+c.name+": "+c.loss)
		}
	}
	return strings.Join(miss, "; ")
}

// capEff parses the CapEff line of /proc/PID/status.
func capEff(status string) (uint64, bool) {
	for line := range strings.Lines(status) {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			var eff uint64
			if _, err := fmt.Sscanf(strings.TrimSpace(v), "%x", &eff); err != nil {
				return 0, false
			}
			return eff, true
		}
	}
	return 0, false
}

// Degraded is what the agent cannot do on this node, as the next snapshot
// would say it (for the agent's start line: known so far).
func (a *Agent) Degraded() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.degraded()
}

// coreCacheErr is the first complaint about the CO-RE cache of the
// reader's iterators, else of the map iterator's, else of the task_file
// iterator's: one directory for all, so one line.
func (a *Agent) coreCacheErr(lost reader.Losses) error {
	if lost.CoreCache != nil {
		return lost.CoreCache
	}
	if m := a.maps; m != nil && m.r != nil {
		if err := m.r.CacheErr(); err != nil {
			return err
		}
	}
	if a.attr != nil {
		return a.attr.iterCacheErr
	}
	return nil
}

// degraded lists, one line each, what the agent cannot do on this node and
// why, as "<feature>: <why>". What the configuration turned off (the
// syscall source chosen, a one-shot scan) is not a loss. Called with a.mu
// held, after the scan's read.
func (a *Agent) degraded() []string {
	var out []string
	add := func(feature, why string) { out = append(out, feature+": "+why) }
	if a.caps != "" {
		add(FeatureCapabilities, a.caps)
	}
	if err := a.stats.Err(); err != nil {
		add(FeatureStats, err.Error())
	}
	configured := a.cfg.NoIterator || a.cfg.ScanSource == ScanSourceSyscall || a.cfg.OneShot
	lost := a.r.Losses()
	switch src, why := a.r.Source(); {
	case configured:
	case src != ScanSourceIterator:
		add(FeatureProgIterator, why)
	default:
		if lost.LinkIterator != "" {
			add(FeatureLinkIterator, lost.LinkIterator)
		}
		if lost.SteadyRead != "" {
			add(FeatureSteadyRead, lost.SteadyRead)
		}
	}
	if m := a.maps; m != nil {
		switch {
		case m.err != nil:
			add(FeatureMaps, m.err.Error())
		case !configured && m.r != nil && !m.r.Source().Iterator:
			add(FeatureMapIterator, m.r.Source().Reason)
		}
	}
	if lost.Facts != nil {
		add(FeatureFacts, lost.Facts.Error())
	}
	if at := a.attr; at != nil {
		if at.iterErr != nil {
			add(FeatureOwnerIterator, at.iterErr.Error())
		}
		if at.ownersDenied != "" {
			add(FeatureOwners, at.ownersDenied+": programs other processes hold have no owner, or owners without their executable; the agent needs CAP_SYS_PTRACE, CAP_DAC_READ_SEARCH and the host's PID namespace")
		}
		if at.pinsDenied != "" {
			add(FeaturePins, at.pinsDenied+": programs pinned there have no pin; the agent needs CAP_DAC_READ_SEARCH")
		}
		if at.cgDenied != "" {
			add(FeatureCgroupAttach, at.cgDenied)
		}
		switch {
		case at.netDenied != "":
			add(FeatureNetdevAttach, at.netDenied+": XDP and tc programs no link names have no target or pod owner"+netnsAdvice)
		case at.hostNetnsErr != nil:
			// Refused, whatever refused it (AppArmor, SELinux, a dropped
			// capability), outside the initial network namespace
			// (owners.HostNetns): the interfaces read are the pod's own.
			add(FeatureNetdevAttach, at.hostNetnsErr.Error()+": interfaces are read in the agent's own network namespace, so XDP and tc programs on the host's have no target or pod owner"+netnsAdvice)
		}
		if at.nsErr != "" {
			add(FeatureNetdevPods, at.nsErr+": programs on pods' interfaces have no pod, and their class is the interface's driver and name"+netnsAdvice)
		}
	}
	if err := lost.Interfaces; err != nil {
		add(FeatureNetdevNames, err.Error()+": XDP, tcx and netkit links' targets are a bare ifindex"+netnsAdvice)
	}
	if err := lost.CgroupLinks; err != nil {
		add(FeatureCgroupLinks, err.Error())
	}
	if lost.RecursionMisses != "" {
		add(FeatureMisses, lost.RecursionMisses+": no program's misses are counted on this kernel (Linux 5.12 added them), so they are absent (JSON null, no series, no alert), not zero")
	}
	if m := a.mw; m != nil {
		switch {
		case m.w == nil:
			add(FeatureMissWatch, m.reason+": every miss is unexplained")
		case m.syms.Err != nil:
			add(FeatureMissSymbols, m.syms.Err.Error()+": stacks are shown by address")
			if err := m.ranger.Unseen(m.syms.Err); err != nil {
				add(FeatureMissRanges, err.Error()+": a miss cannot be told from the watched program's own code, so every miss is unexplained")
			}
		}
	}
	if err := a.coreCacheErr(lost); err != nil {
		add(FeatureCoreCache, err.Error()+": every start parses kernel BTF again (tens of ms per iterator); set BPFLEET_CACHE_DIR to a writable directory (the chart mounts an emptyDir at /tmp for it)")
	}
	for _, c := range a.calibration {
		if c.Inconclusive {
			add(FeatureCalibration+" "+c.AttachType, c.Reason)
		}
	}
	var features []string
	for _, d := range out {
		f, _, _ := strings.Cut(d, ": ")
		features = append(features, f)
	}
	if l := confinementLine(a.apparmor, features); l != "" {
		add(FeatureConfinement, l)
	}
	return out
}
