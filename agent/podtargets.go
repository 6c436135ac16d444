package agent

import (
	"cmp"
	"strings"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/owners"
)

// The attribution's half of target classes (agent/internal/reader/targets.go
// has the reader's): a cgroup or interface that belongs to a pod the filler
// names (the Kubernetes API) gets the pod's workload as its class, and a
// program no process holds is owned by that pod.

// workloadName is a pod's workload as the filler names it; the zero value:
// not named.
type workloadName struct{ namespace, kind, name string }

// beginApply starts a round of apply calls (one scan's): the pod namespace
// walk may run once in it, and the workload names are kept while the
// filler's Generation stays.
func (at *attribution) beginApply() {
	at.nsWalked = false
	if g, ok := at.filler.(generationFiller); ok {
		if gen := g.Generation(); gen != at.workloadGen {
			clear(at.workloads)
			at.workloadGen = gen
		}
	}
}

// workload is the workload of the pod with UID uid, as the filler names it.
func (at *attribution) workload(uid string) (workloadName, bool) {
	if uid == "" || at.filler == nil {
		return workloadName{}, false
	}
	w, ok := at.workloads[uid]
	if !ok {
		o := Owner{PodUID: uid}
		at.filler.Fill(&o)
		if kind, name := o.Workload(); o.PodNamespace != "" && name != "" {
			w = workloadName{o.PodNamespace, kind, name}
		}
		at.workloads[uid] = w
	}
	return w, w.namespace != ""
}

// netnsPod is the container or pod behind the interface ifindex whose
// other end is in the namespace with id nsid: cached by interface, found
// with one walk of every process's namespace (at most once a scan) when an
// interface is new.
func (at *attribution) netnsPod(ifindex int, nsid int32) owners.Container {
	key := int64(nsid) + 1
	if e, ok := at.netns[ifindex]; ok && e.peerNetns == key {
		e.seen = at.netnsSeen
		at.netns[ifindex] = e
		return e.c
	}
	if !at.nsWalked {
		// An error leaves this scan's new interfaces without a pod, and
		// says why in Degraded.
		var walkErr error
		err := owners.InNetns(at.hostNetns, func() { at.nsByID, walkErr = owners.NetnsContainers(at.procRoot) })
		at.nsErr = ""
		if err = cmp.Or(err, walkErr); err != nil {
			at.nsErr = err.Error()
		}
		at.nsWalked = true
	}
	c := at.nsByID[nsid]
	at.netns[ifindex] = netnsPod{peerNetns: key, c: c, seen: at.netnsSeen}
	return c
}

// dropGoneNetdevs forgets the interfaces no refresh or apply asked about
// since the last refresh began.
func (at *attribution) dropGoneNetdevs() {
	for i, e := range at.netns {
		if e.seen != at.netnsSeen {
			delete(at.netns, i)
		}
	}
}

// joinAttachments turns a refresh's attachments into each program's attach
// type, target, class and owners.
func (at *attribution) joinAttachments(atts []owners.Attachment) {
	clear(at.attached)
	byProg := make(map[uint32][]owners.Attachment, len(atts))
	for _, a := range atts {
		byProg[a.ProgID] = append(byProg[a.ProgID], a)
	}
	for id, as := range byProg {
		j := attachedProg{attachType: as[0].AttachType}
		targets := make([]string, 0, len(as))
		classes := make([]string, 0, len(as))
		for _, a := range as {
			class, c := at.attachmentClass(a)
			target := a.Target
			if a.Mode != "" { // "eth0 (generic)", "eth0 (htb 1:10)"
				target += " (" + a.Mode + ")"
				class += " (" + a.Mode + ")"
			}
			targets, classes = append(targets, target), append(classes, class)
			if c.ID == "" && c.PodUID == "" {
				continue
			}
			o := Owner{ContainerID: c.ID, Runtime: c.Runtime, PodUID: c.PodUID, Via: ViaAttachment}
			if a.Ifindex == 0 {
				o.Cgroup = a.Target
			}
			if at.filler != nil {
				at.filler.Fill(&o)
			}
			j.owners = append(j.owners, o)
		}
		j.target = reader.JoinStrings(targets)
		if cl := reader.JoinStrings(classes); cl != j.target {
			j.class = cl
		}
		at.attached[id] = j
	}
}

// attachmentClass is the class of an attachment's target (its pod's
// workload where the filler names it) and the container or pod the target
// belongs to.
func (at *attribution) attachmentClass(a owners.Attachment) (string, owners.Container) {
	if a.Ifindex == 0 { // a cgroup
		c := a.Container()
		if w, ok := at.workload(c.PodUID); ok {
			return owners.WorkloadClass(w.namespace, w.kind, w.name), c
		}
		return owners.CgroupClass(strings.TrimPrefix(a.Target, at.cgroup)), c
	}
	nsid, ok := a.PeerNetnsID()
	if !ok {
		return owners.NetdevClass(a.Target, a.Kind), owners.Container{}
	}
	// The namespace's process may be any of the pod's containers: the
	// interface is the pod's, not the container's.
	c := owners.Container{PodUID: at.netnsPod(a.Ifindex, nsid).PodUID}
	if w, ok := at.workload(c.PodUID); ok {
		return owners.NetdevWorkloadClass(a.Kind, w.namespace, w.kind, w.name), c
	}
	return owners.NetdevClass(a.Target, a.Kind), c
}

// applyLinkPods gives p (its links joined) the workload class of the pods
// its links' targets belong to, where the filler names them.
func (at *attribution) applyLinkPods(p *Program) {
	if at.filler == nil {
		return
	}
	upgraded := false
	for i := range p.Links {
		if c := at.linkPodClass(&p.Links[i]); c != "" {
			p.Links[i].TargetClass = c // this scan's own links (join made them)
			upgraded = true
		}
	}
	if upgraded {
		p.TargetClass = reader.JoinClasses(p.Links)
	}
}

// linkPodClass is the workload class of l's target's pod, empty when l's
// target is no pod's or the filler does not name it.
func (at *attribution) linkPodClass(l *Link) string {
	tp := l.Pod
	if tp == nil {
		return ""
	}
	uid := tp.UID
	if tp.PeerNetns != 0 {
		uid = at.netnsPod(tp.Ifindex, int32(tp.PeerNetns-1)).PodUID
	}
	w, ok := at.workload(uid)
	switch {
	case !ok:
		return ""
	case tp.Ifindex != 0:
		return owners.NetdevWorkloadClass(tp.Kind, w.namespace, w.kind, w.name)
	}
	return owners.WorkloadClass(w.namespace, w.kind, w.name)
}
