package reader

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/agent/internal/prog"
	"github.com/bpfleet/bpfleet/agent/owners"
)

// Link targets that name one instance — a cgroup, an interface made per
// pod, a binary under a container's root — get a class beside them
// (Link.TargetClass, Program.TargetClass): what the workload metrics level
// keys its series by, so a pod's restart adds none. The reader gives the
// classes the kernel's facts say (a cgroup's path, an interface's driver
// and name); the attribution names the pod's workload where the Kubernetes
// API knows it (agent/attribution.go, agent/podtargets.go).

// targetState is what the reader keeps to name link targets: read once per
// new link (a link's target never changes), never per scan.
type targetState struct {
	// netns is the network namespace interfaces are read in (the host's,
	// owners.HostNetns), "" for the agent's own.
	netns string
	// netdevs are the interfaces of the agent's network namespace by
	// ifindex, from one link dump, dumped again (at most once a scan) when
	// a new link names an ifindex it lacks.
	netdevs    map[int]owners.Netdev
	netdevsSeq uint64 // the reader's seq at the last dump; 0: none yet
	// netdevErr is why the last dump failed (the namespace could not be
	// entered, the dump was refused), nil when it answered: a degraded
	// line, since every interface target is then a bare ifindex.
	netdevErr error
	// cgroupMount is the cgroup2 mount cgroup links' ids are opened on,
	// looked up at the first cgroup link.
	cgroupMount      string
	cgroupMountKnown bool
	// cgroupErr is why a cgroup link's cgroup could not be opened by id
	// for want of privilege (a degraded line); a cgroup removed since is
	// no error.
	cgroupErr error
}

// netdev is the interface ifindex of the agent's namespace.
func (r *Reader) netdev(ifindex uint32) (owners.Netdev, bool) {
	t := &r.targets
	if d, ok := t.netdevs[int(ifindex)]; ok {
		return d, true
	}
	if t.netdevsSeq == r.seq && t.netdevs != nil {
		return owners.Netdev{}, false // dumped in this scan already
	}
	var ds []owners.Netdev
	var dumpErr error
	// An error leaves the interfaces unnamed; Losses says why.
	err := owners.InNetns(t.netns, func() { ds, dumpErr = owners.Netdevs() })
	t.netdevErr = nil
	if err = cmp.Or(err, dumpErr); err != nil {
		t.netdevErr = fmt.Errorf("reading interfaces: %w", err)
	}
	t.netdevs = make(map[int]owners.Netdev, len(ds))
	for _, d := range ds {
		t.netdevs[d.Index] = d
	}
	t.netdevsSeq = r.seq
	d, ok := t.netdevs[int(ifindex)]
	return d, ok
}

// netdevTarget names l's interface ifindex (an XDP, tcx or netkit link):
// its name, its class, and, when its other end is in another namespace,
// the hint the attribution finds the pod with.
func (r *Reader) netdevTarget(l *Link, ifindex uint32) {
	if ifindex == 0 { // the interface went away: the link is defunct
		return
	}
	d, ok := r.netdev(ifindex)
	if !ok {
		// In another namespace, or gone since: the index alone names
		// nothing that lasts.
		l.Target, l.TargetClass = "ifindex "+strconv.FormatUint(uint64(ifindex), 10), "ifindex"
		return
	}
	l.Target = d.Name
	if c := owners.NetdevClass(d.Name, d.Kind); c != d.Name {
		l.TargetClass = c
	}
	if d.PeerNetns {
		l.Pod = &prog.TargetPod{Kind: d.Kind, Ifindex: d.Index, PeerNetns: int64(d.PeerNetnsID) + 1}
	}
}

// cgroupTarget names l's cgroup, whose id is id (a cgroup link): its path,
// its class and the pod UID the path holds. A cgroup that cannot be opened
// by id keeps cgroup:<id> with the class cgroup.
func (r *Reader) cgroupTarget(l *Link, id uint64) {
	l.Target, l.TargetClass = "cgroup:"+strconv.FormatUint(id, 10), "cgroup"
	t := &r.targets
	if !t.cgroupMountKnown {
		t.cgroupMount, _ = owners.CgroupV2Mount() // none: cgroup links are refused anyway
		t.cgroupMountKnown = true
	}
	if t.cgroupMount == "" {
		return
	}
	p, err := owners.CgroupPath(t.cgroupMount, id)
	if err != nil {
		if errors.Is(err, unix.EPERM) || errors.Is(err, unix.EACCES) {
			t.cgroupErr = fmt.Errorf("cgroup links' cgroups cannot be opened by id (%w): grant CAP_DAC_READ_SEARCH, else their target is cgroup:<id> and their class cgroup", err)
		}
		return
	}
	rel := strings.TrimPrefix(p, t.cgroupMount)
	l.Target, l.TargetClass = p, owners.CgroupClass(rel)
	if uid := owners.ParseCgroupPath(rel).PodUID; uid != "" {
		l.Pod = &prog.TargetPod{UID: uid}
	}
}

// pathClass is a binary's path's class, empty when the path is its own.
func pathClass(p string) string {
	if c := owners.PathClass(p); c != p {
		return c
	}
	return ""
}

// JoinClasses is joinTargets for the links' classes: empty when no link's
// target has a class.
func JoinClasses(links []Link) string {
	if len(links) == 1 {
		return links[0].TargetClass // nothing to join: no allocation
	}
	classed := false
	for i := range links {
		classed = classed || links[i].TargetClass != ""
	}
	if !classed {
		return ""
	}
	cs := make([]string, len(links))
	for i, l := range links {
		if cs[i] = l.TargetClass; cs[i] == "" {
			cs[i] = l.Target
		}
	}
	return JoinStrings(cs)
}
