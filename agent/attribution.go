package agent

import (
	"fmt"
	"io"

	"github.com/bpfleet/bpfleet/agent/internal/reader"
	"github.com/bpfleet/bpfleet/agent/owners"
	"github.com/bpfleet/bpfleet/probes/taskfile"
	"github.com/cilium/ebpf"
)

// Where a refresh found which processes hold BPF fds (ScanStats.OwnersSource).
const (
	OwnersSourceIterator = "iterator" // the task_file iterator: one read
	OwnersSourceProc     = "proc"     // a walk of /proc/PID/fd
)

// ViaAttachment marks an owner found through a program's attachment (a
// container's cgroup) rather than a process holding its fd: runc's
// cgroup_device programs have no holder at all.
const ViaAttachment = "attachment"

// attribution finds who owns each program: processes holding its fd, a
// link's or a perf_event fd it is attached through (through the task_file
// iterator where the kernel allows it, else a /proc walk), bpffs pins, and
// — for programs no link names — the probe, tracepoint, cgroup or
// interface they are attached to. It is refreshed only when a program
// appears that has not been attributed, or after Config.OwnerRefresh.
type attribution struct {
	scanner *owners.Scanner
	iterErr error
	// iterCacheErr says why the task_file iterator's CO-RE cache could
	// not be read or written.
	iterCacheErr error
	iter         io.Closer // the task_file iterator loaded, nil for a pin or the walk
	pin          string    // the task_file iterator's pin, when read from one
	noPins       bool      // Config.NoPins
	srcName      string    // OwnersSourceIterator or OwnersSourceProc
	bpffs        []string
	cgroup       string
	cgErr        error
	progs        map[uint32]ownedProg
	pins         map[uint32][]string
	attached     map[uint32]attachedProg
	// perf is what the programs attached through a perf_event fd with no
	// link (PERF_EVENT_IOC_SET_BPF) are attached to, named as their link
	// would be (reader.NamePerfAttachments).
	perf map[uint32]attachedProg
	// pinScan remembers what each bpffs file is between walks.
	pinScan  *owners.PinScanner
	filler   OwnerFiller
	procRoot string
	// hostNetns is where the interfaces are (owners.HostNetns), "" the
	// agent's own namespace.
	hostNetns string
	// hostNetnsErr is the refusal to read pid 1's namespace: hostNetns
	// is then a guess, the agent's own (degraded.go says when it is not).
	hostNetnsErr error
	// netns is the pods behind the interfaces whose other end is in
	// another namespace, by ifindex: found with one /proc walk when an
	// interface appears (at most once a scan), never per scan.
	netns     map[int]netnsPod
	nsWalked  bool // NetnsContainers walked since the last beginApply
	nsByID    map[int32]owners.Container
	netnsSeen uint64 // refresh generation, to drop interfaces gone
	// workloads caches the workload of each pod the filler was asked
	// about (unnamed ones too), by pod UID, while its Generation stays
	// (cleared at every refresh without one).
	workloads   map[string]workloadName
	workloadGen uint64
	// filledGen is the filler's Generation when progs were filled;
	// filledOK says progs' owners are what filler would fill now (false:
	// no refresh yet, a new filler, or one without Generation).
	filledGen uint64
	filledOK  bool
	// watch holds the owners' pidfds (only with procfs at /proc: the
	// pids are then the agent's own namespace's).
	watch *ownerWatch
	pids  map[int]bool // the owners' pids, rebuilt at every refresh
	// cgDenied and netDenied are the kernel's refusal of the last
	// attachment query of that kind (missing privilege, or for netDenied
	// the host's network namespace refused), "" when it answered:
	// reported in Degraded.
	cgDenied, netDenied string
	// nsErr is why the last walk for the pods behind interfaces failed,
	// "" when it answered: a degraded line, as those interfaces' programs
	// then have no pod.
	nsErr string
	// ownersDenied is the last refusal (EACCES, EPERM) of an owner read
	// of a process's fds or facts, kept once seen (facts are read once
	// per process, so the refusal is not seen again); pinsDenied is the
	// last pin walk's refusal, "" when it had none.
	ownersDenied string
	pinsDenied   string
}

// attachedProg is what a refresh joined to a program that no link names,
// from its attachments: the agent's attach type, target and class, and
// the owners the attachments say (a container's cgroup, a pod's
// interface), converted and filled.
type attachedProg struct {
	attachType, target, class string
	owners                    []Owner
}

// netnsPod is the pod (zero: none) of the namespace with id peerNetns
// (plus one) behind one interface.
type netnsPod struct {
	peerNetns int64
	c         owners.Container
	seen      uint64
}

// ownedProg is one program's owners: the Scanner's slice, and the agent's
// made from it (converted and filled). A refresh that gets the same slice
// from the Scanner (its owners did not change) keeps the agent's.
type ownedProg struct {
	raw    []owners.Owner
	owners []Owner
}

// generationFiller is an OwnerFiller that says when its answers may have
// changed (kube.Pods: the pod cache): while Generation stays the same, an
// owner filled once needs no Fill again.
type generationFiller interface {
	Generation() uint64
}

func newAttribution(cfg Config) *attribution {
	at := &attribution{bpffs: cfg.BPFFS, progs: map[uint32]ownedProg{}, attached: map[uint32]attachedProg{}, perf: map[uint32]attachedProg{}, pids: map[int]bool{},
		pinScan:  owners.NewPinScanner(owners.PinOptions{}),
		procRoot: cfg.ProcRoot, netns: map[int]netnsPod{}, workloads: map[string]workloadName{}, noPins: cfg.NoPins}
	at.hostNetns, at.hostNetnsErr = owners.HostNetns(cfg.ProcRoot)
	var src owners.Source
	if cfg.OneShot && cfg.ProcRoot == "/proc" {
		// nil without a running agent's pin: walk /proc
		var it *taskfile.Iter
		if it, at.pin = openPinnedTaskfile(cfg.BPFFS); it != nil {
			src, at.iter = taskfileSource{it}, it
		}
	}
	// The iterator sees the agent's own pid namespace's view of every task
	// in one read(); with a host /proc mounted elsewhere the pids it
	// reports could differ from that /proc's, so the walk is used there.
	// A one-shot list loads it only from the CO-RE cache (a few ms, less
	// than the walk of 1,000 held fds): relocating it from kernel BTF
	// costs ~30 ms, more than the walk it replaces.
	switch {
	case src != nil || cfg.ProcRoot != "/proc":
	case cfg.OwnerIterator:
		if it, li, err := taskfile.LoadCached(cfg.CacheDir); err == nil {
			src, at.iter, at.iterCacheErr = taskfileSource{it}, it, li.CacheErr
		} else {
			at.iterErr = fmt.Errorf("task_file iterator unavailable, walking /proc instead: %w", err)
		}
	case cfg.OneShot && !cfg.NoIterator && taskfile.Cached(cfg.CacheDir):
		// Loaded while the programs are read, on the other CPU.
		p := loadTaskfile(cfg.CacheDir, owners.NewProcSource(cfg.ProcRoot))
		src, at.iter = p, p
	}
	at.srcName = OwnersSourceProc
	if src != nil {
		at.srcName = OwnersSourceIterator
	}
	at.scanner = owners.NewScanner(cfg.ProcRoot, src)
	if cfg.ProcRoot == "/proc" {
		at.watch = &ownerWatch{}
	}
	at.cgroup, at.cgErr = owners.CgroupV2Mount()
	return at
}

// openPinnedTaskfile opens the task_file iterator a running agent pinned
// (probes/taskfile/pin.go), so a one-shot list finds owners in one read
// rather than a /proc walk; nil when there is none.
func openPinnedTaskfile(bpffs []string) (*taskfile.Iter, string) {
	for _, dir := range bpffs {
		if it, err := taskfile.OpenPinned(dir); err == nil {
			return it, taskfile.PinPath(dir)
		}
	}
	return nil, ""
}

// pendingTaskfile is a task_file iterator being loaded beside a one-shot
// list's program read: its Holdings waits for the load, and walks /proc
// when the kernel refused it.
type pendingTaskfile struct {
	done chan struct{}
	it   *taskfile.Iter
	err  error
	proc owners.Source
}

func loadTaskfile(cacheDir string, proc owners.Source) *pendingTaskfile {
	p := &pendingTaskfile{done: make(chan struct{}), proc: proc}
	go func() {
		defer close(p.done)
		p.it, _, p.err = taskfile.LoadCached(cacheDir)
	}()
	return p
}

func (p *pendingTaskfile) Holdings(dst []owners.Holding, st *owners.Stats) ([]owners.Holding, error) {
	<-p.done
	if p.err != nil {
		return p.proc.Holdings(dst, st)
	}
	return taskfileSource{p.it}.Holdings(dst, st)
}

func (p *pendingTaskfile) Close() error {
	<-p.done
	if p.it == nil {
		return nil
	}
	return p.it.Close()
}

// ownProgram is the id of the task_file iterator a one-shot scan loaded
// itself, 0 when none. Called after the refresh.
func (at *attribution) ownProgram() uint32 {
	if p, ok := at.iter.(*pendingTaskfile); ok && p.it != nil {
		return p.it.ProgramID()
	}
	return 0
}

// sourceName is OwnersSourceIterator or OwnersSourceProc: how the last
// refresh found holders. Called after the refresh.
func (at *attribution) sourceName() string {
	if p, ok := at.iter.(*pendingTaskfile); ok && p.err != nil {
		return OwnersSourceProc
	}
	return at.srcName
}

// taskfileSource adapts the task_file iterator to owners.Source.
type taskfileSource struct{ it *taskfile.Iter }

func (s taskfileSource) Holdings(dst []owners.Holding, st *owners.Stats) ([]owners.Holding, error) {
	err := s.it.Read(func(e taskfile.Entry) {
		h := owners.Holding{PID: int32(e.PID), FD: int32(e.FD), ProgID: e.ProgID}
		switch e.Kind {
		case taskfile.KindLink:
			h.LinkID = e.LinkID
		case taskfile.KindPerf:
			// The Scanner asks the kernel what it is attached to.
			h.Perf = true
			dst = append(dst, h)
			return
		}
		dst = append(dst, h)
		st.BPFFDs++
	})
	return dst, err
}

// holders is the part of a refresh that needs no program list: which
// processes hold which fds, and the pins. It can be read while the
// programs are.
type holders struct {
	res  *owners.Result
	err  error
	pins []owners.Pin
	pst  owners.PinStats
}

// readHolders walks /proc (or runs the task_file iterator) and bpffs. It
// and walkOthers are the only users of at.scanner and at.pinScan.
func (at *attribution) readHolders() holders {
	res, err := at.scanner.Scan(nil)
	pins, pst := at.scanPins()
	return holders{res, err, pins, pst}
}

// scanPins walks bpffs, unless the configuration wants no pins.
func (at *attribution) scanPins() ([]owners.Pin, owners.PinStats) {
	if at.noPins {
		return nil, owners.PinStats{}
	}
	return at.pinScan.Scan(at.bpffs)
}

// walkOthers is readHolders run beside a program read, but for the
// agent's own fds: where the read opens programs and links by id, the
// walk would see the agent holding whichever one it had open at that
// instant. finishHolders adds the agent's own fds, walked once the read
// has closed every fd it opened.
func (at *attribution) walkOthers() holders {
	at.scanner.WalkOthers()
	pins, pst := at.scanPins()
	return holders{pins: pins, pst: pst}
}

// finishHolders completes walkOthers' h; only after the program read
// returned (and h was received from the walk).
func (at *attribution) finishHolders(h *holders) {
	h.res, h.err = at.scanner.Finish(nil)
}

// refresh takes new holders and re-reads attachments; the returned errors
// are counted in the scan's stats, never fatal.
func (at *attribution) refresh(progs reader.View, h holders) []error {
	var errs []error
	at.netnsSeen++
	if _, ok := at.filler.(generationFiller); !ok {
		clear(at.workloads) // no way to tell they still hold
	}
	res := h.res
	if h.err != nil {
		errs = append(errs, fmt.Errorf("reading owners: %w", h.err))
	}
	at.noteRefusals(res)
	at.updateOwners(res)
	at.updatePerf(res)
	at.pins = owners.PinsByProg(h.pins)
	at.pinsDenied = ""
	if h.pst.Denied > 0 {
		at.pinsDenied = h.pst.LastError
	}
	if at.watch != nil {
		clear(at.pids)
		for _, p := range at.progs {
			for _, o := range p.owners {
				if o.PID > 0 {
					at.pids[o.PID] = true
				}
			}
		}
		at.watch.reset(at.pids)
	}

	// Attachments are asked only for the kinds of program that have
	// neither a link nor a holder: a cgroup walk per attach type is many
	// bpf() calls on a busy node.
	var cgTypes []ebpf.ProgramType
	netdev := false
	for i := range progs.Len() {
		p := progs.At(i)
		if len(p.Links) > 0 || len(at.progs[p.ID].owners) > 0 {
			continue
		}
		switch t := reader.ProgType(p.Type); {
		case isCgroupProgType(t):
			if !containsType(cgTypes, t) {
				cgTypes = append(cgTypes, t)
			}
		case t == ebpf.XDP || t == ebpf.SchedCLS || t == ebpf.SchedACT:
			netdev = true
		}
	}
	var atts []owners.Attachment
	if len(cgTypes) > 0 && at.cgErr == nil {
		a, st := owners.CgroupAttachments(at.cgroup, owners.CgroupOptions{ProgTypes: cgTypes})
		atts = append(atts, a...)
		at.cgDenied = st.Denied
		if st.LastError != "" {
			errs = append(errs, fmt.Errorf("querying cgroup attachments: %s", st.LastError))
		}
	}
	if netdev {
		var a []owners.Attachment
		var st owners.AttachStats
		err := owners.InNetns(at.hostNetns, func() { a, st = owners.NetdevAttachments() })
		if err != nil {
			errs = append(errs, fmt.Errorf("querying interface attachments: %w", err))
		}
		atts = append(atts, a...)
		at.netDenied = st.Denied
		if err != nil {
			at.netDenied = err.Error()
		}
		if st.LastError != "" {
			errs = append(errs, fmt.Errorf("querying interface attachments: %s", st.LastError))
		}
	}
	at.joinAttachments(atts)
	return errs
}

// noteRefusals keeps the last refusal a walk counted (res may be nil): a
// process's facts are read once and cached, so a walk after it does not
// count the same refusal again, and one discarded must still say it.
func (at *attribution) noteRefusals(res *owners.Result) {
	if res != nil && res.Stats.Denied > 0 {
		at.ownersDenied = res.Stats.LastError
	}
}

// updateOwners makes progs res.Programs' owners, converted and filled. A
// program whose Scanner slice is the one of the last refresh keeps its
// owners (the same slice, unless the filler's answers may have changed),
// so a refresh after a few programs changed converts and fills only
// theirs.
func (at *attribution) updateOwners(res *owners.Result) {
	if res == nil {
		clear(at.progs)
		return
	}
	gen, genOK := uint64(0), at.filler == nil
	if g, ok := at.filler.(generationFiller); ok {
		gen, genOK = g.Generation(), true
	}
	refill := !at.filledOK || gen != at.filledGen
	// gen is read before any Fill: a change the filler sees during the
	// fills moves it past gen, so the next refresh fills again.
	at.filledGen, at.filledOK = gen, genOK
	for id, raw := range res.Programs {
		if p, ok := at.progs[id]; ok && !refill && sameOwners(p.raw, raw) {
			continue
		}
		// A copy: fillers write pod fields, and raw stays the Scanner's.
		out := make([]Owner, len(raw))
		copy(out, raw)
		if at.filler != nil {
			for i := range out {
				at.filler.Fill(&out[i])
			}
		}
		at.progs[id] = ownedProg{raw: raw, owners: out}
	}
	if len(at.progs) > len(res.Programs) {
		for id := range at.progs {
			if _, ok := res.Programs[id]; !ok {
				delete(at.progs, id)
			}
		}
	}
}

// updatePerf names what each program held by a perf_event fd is attached
// to, as the perf_event link of the same probe is named: one attach type
// and target however the kernel attached it.
func (at *attribution) updatePerf(res *owners.Result) {
	clear(at.perf)
	if res == nil {
		return
	}
	for id, as := range res.Perf {
		var j attachedProg
		j.attachType, j.target, j.class = reader.NamePerfAttachments(as)
		at.perf[id] = j
	}
}

// setFiller plugs in f; the next refresh fills every owner with it.
func (at *attribution) setFiller(f OwnerFiller) {
	at.filler, at.filledOK = f, false
	clear(at.workloads)
}

// sameOwners says a and b are the same slice: the Scanner hands out the
// same one for a program whose owners did not change, and never writes
// one it handed out.
func sameOwners(a, b []owners.Owner) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

func isCgroupProgType(t ebpf.ProgramType) bool {
	switch t {
	case ebpf.CGroupSKB, ebpf.CGroupSock, ebpf.CGroupDevice, ebpf.CGroupSockAddr, ebpf.CGroupSysctl, ebpf.CGroupSockopt, ebpf.SockOps, ebpf.LSM:
		return true
	}
	return false
}

func containsType(ts []ebpf.ProgramType, t ebpf.ProgramType) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

// ownersStable says whether the owners found at the last refresh can be
// trusted until the slow period (ownerStablePeriod) passes: every owner
// process is watched and none has exited. False without a watch.
func (at *attribution) ownersStable() bool {
	return at.watch != nil && !at.watch.broken
}

// ownerExited reports whether a watched owner process exited since the
// last refresh.
func (at *attribution) ownerExited() bool {
	return at.watch != nil && at.watch.exited()
}

func (at *attribution) close() {
	at.pinScan.Close()
	if at.watch != nil {
		at.watch.close()
	}
	if at.iter != nil {
		at.iter.Close()
	}
}

// apply joins the last refresh's answers to a program.
func (at *attribution) apply(p *Program) {
	if o := at.progs[p.ID].owners; len(o) > 0 {
		p.Owners = o
	}
	p.Pins = at.pins[p.ID]
	perf, byPerf := at.perf[p.ID]
	switch {
	case len(p.Links) > 0:
		// A link's attachment wins over the perf_event fd that kernels
		// with perf_event links keep beside it: the same probe, with
		// its link id and missed counter.
		at.applyLinkPods(p)
		if byPerf && p.AttachTarget == "" {
			// Kernels from 5.15 to 6.5 make the perf_event link but
			// describe nothing of its probe in link info; the
			// perf_event fd beside it names the probe.
			p.AttachTarget, p.TargetClass = perf.target, perf.class
		}
		return
	case byPerf:
		p.AttachType, p.AttachTarget, p.TargetClass = perf.attachType, perf.target, perf.class
		return
	}
	j, ok := at.attached[p.ID]
	if !ok {
		return
	}
	p.AttachType, p.AttachTarget, p.TargetClass = j.attachType, j.target, j.class
	if len(p.Owners) == 0 && len(j.owners) > 0 {
		p.Owners = j.owners
	}
}
