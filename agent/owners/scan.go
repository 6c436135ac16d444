package owners

import (
	"cmp"
	"errors"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/bpfsys"
)

// Owner is a process that holds an fd of a program or of one of its links.
// It is the one owner type: the agent's Program.Owners (agent.Owner, an
// alias) are these, filled further by an OwnerFiller.
type Owner struct {
	PID         int    `json:"pid"`
	Comm        string `json:"comm"`
	Exe         string `json:"exe,omitempty"`
	Cgroup      string `json:"cgroup,omitempty"`
	ContainerID string `json:"container_id"`
	// Runtime is the container runtime the cgroup path names:
	// containerd, cri-o, docker, podman.
	Runtime string `json:"runtime,omitempty"`
	PodUID  string `json:"pod_uid"`
	// Pod fields are left empty here; an optional Kubernetes resolver
	// fills them.
	PodName       string `json:"pod_name,omitempty"`
	PodNamespace  string `json:"pod_namespace,omitempty"`
	ContainerName string `json:"container_name,omitempty"`
	// WorkloadKind and WorkloadName name the pod's controller, what stays
	// when the pod is replaced: DaemonSet, Deployment (a ReplicaSet's
	// owner), StatefulSet, Job, CronJob, ... Empty for a pod no controller
	// owns.
	WorkloadKind string `json:"workload_kind,omitempty"`
	WorkloadName string `json:"workload_name,omitempty"`
	// Via says how the ownership was found: "fd" (holds the program's fd),
	// "link" (holds a link of it, not its fd), "perf_event" (holds only a
	// perf_event fd it is attached through: PERF_EVENT_IOC_SET_BPF, with
	// no link) or "attachment" (no process holds it; the agent found the
	// container whose cgroup it is attached to).
	Via string `json:"via"`
}

// FillFromCgroup sets o's container id, runtime and pod UID from its
// cgroup path where the owner walk did not: what a filler without the
// Kubernetes API can say.
func (o *Owner) FillFromCgroup() {
	if o.Cgroup == "" || (o.ContainerID != "" && o.PodUID != "") {
		return
	}
	inf := ParseCgroupPath(o.Cgroup)
	// A runtime's monitor (crio-conmon-<id>) names the container it
	// watches but does not run in it: it belongs to the pod only.
	if o.ContainerID == "" && !inf.Conmon {
		o.ContainerID = inf.ID
	}
	if o.Runtime == "" && !inf.Conmon {
		o.Runtime = inf.Runtime
	}
	if o.PodUID == "" {
		o.PodUID = inf.PodUID
	}
}

// Workload names the owner's workload: its pod's controller, or the pod
// itself (kind Pod) when no controller owns it. Empty outside a named pod.
func (o *Owner) Workload() (kind, name string) {
	if o.WorkloadKind == "" && o.PodName != "" {
		return "Pod", o.PodName
	}
	return o.WorkloadKind, o.WorkloadName
}

// Ways an owner holds a program.
const (
	ViaFD        = "fd"
	ViaLink      = "link"
	ViaPerfEvent = "perf_event"
)

// PerfAttachment is a program attached through a process's perf_event fd
// with PERF_EVENT_IOC_SET_BPF: a kprobe, uprobe or tracepoint on a kernel
// without perf_event bpf_links (before 5.15) or by a loader that does not
// use them. Kernels with the link keep the perf_event fd beside it, so a
// program may have both; its link says the same, with more (kprobe
// missed).
type PerfAttachment struct {
	PID, FD int
	// Query is the kernel's BPF_TASK_FD_QUERY answer; Known is false
	// where the kernel would not describe the fd (a perf_event program on
	// a hardware or software event): only its program is known then.
	Query bpfsys.TaskFD
	Known bool
}

// Result is one owner scan. It, its maps and Links' slices belong to the
// Scanner and are valid until its next Scan; Programs' slices stay valid
// for good (see Scan).
type Result struct {
	// Programs maps a program id to the processes holding it, by pid.
	Programs map[uint32][]Owner
	// Links maps a link id to the pids holding a link fd, ascending.
	Links map[uint32][]int
	// LinkProgs maps a link id to its program id, as the link fd said.
	LinkProgs map[uint32]uint32
	// Perf maps a program id to the perf_event fds it is attached
	// through, by pid and fd.
	Perf     map[uint32][]PerfAttachment
	Stats    Stats
	Duration time.Duration
}

// Scanner finds the owners of BPF programs. It keeps a cache of per-process
// facts (comm, exe, cgroup, container) keyed by pid and process start time,
// so a reused pid is read afresh and a long-lived holder is read once, and
// each program's owners from the last scan, so a scan allocates only for
// programs whose owners changed. Not safe for concurrent use.
type Scanner struct {
	src      Source
	procRoot string
	cache    map[int32]*procFacts
	gen      uint64
	holdings []Holding
	buf      []byte
	// progs is every program's owners as the last scan found them;
	// res.Programs holds the same slices.
	progs map[uint32]*progOwners
	res   Result
	// nameBuf receives the names BPF_TASK_FD_QUERY returns; perfQuery
	// says its pids are ours (procRoot is our pid namespace's), decided
	// at the first perf_event fd.
	nameBuf              []byte
	perfQuery, perfKnown bool
	// self is this process's pid as procRoot numbers it (0: not in it),
	// selfKnown says it was looked up; selfSrc walks its fds for Finish,
	// selfBuf takes them.
	self      int32
	selfKnown bool
	selfSrc   *ProcSource
	selfBuf   []Holding
	// walked says holdings are WalkOthers' (walkErr its error, walkTime
	// its duration), waiting for Finish.
	walked   bool
	walkErr  error
	walkTime time.Duration
}

type procFacts struct {
	start  uint64
	gen    uint64
	comm   string
	exe    string
	cgroup string
	c      Container
}

// progOwners is one program's owners across scans. owners, once handed out
// in Result.Programs, is never written again (a snapshot may hold it): a
// scan that finds the same owners hands out the same slice, one that finds
// a change builds a new one.
type progOwners struct {
	owners []Owner
	// gen is the last scan that found an owner, n how many it has found
	// so far: owners[:n] while they equal the last scan's, else fresh.
	gen   uint64
	n     int
	fresh []Owner
}

// add appends o, the next owner by pid, to this scan's owners.
func (e *progOwners) add(o Owner) {
	if e.fresh == nil {
		if e.n < len(e.owners) && e.owners[e.n] == o {
			e.n++
			return
		}
		e.fresh = make([]Owner, e.n, max(e.n+1, len(e.owners)))
		copy(e.fresh, e.owners)
	}
	e.fresh = append(e.fresh, o)
	e.n++
}

// lastPID is the pid of this scan's last owner (-1 before the first).
func (e *progOwners) lastPID() int {
	switch {
	case e.n == 0:
		return -1
	case e.fresh != nil:
		return e.fresh[e.n-1].PID
	}
	return e.owners[e.n-1].PID
}

// NewScanner returns a Scanner reading process facts from the procfs at
// procRoot ("/proc" when empty) and holdings from src (a ProcSource over
// procRoot when nil).
func NewScanner(procRoot string, src Source) *Scanner {
	if procRoot == "" {
		procRoot = "/proc"
	}
	if src == nil {
		src = NewProcSource(procRoot)
	}
	return &Scanner{
		src: src, procRoot: procRoot, cache: map[int32]*procFacts{}, buf: make([]byte, 4<<10),
		progs: map[uint32]*progOwners{},
		res: Result{Programs: map[uint32][]Owner{}, Links: map[uint32][]int{}, LinkProgs: map[uint32]uint32{},
			Perf: map[uint32][]PerfAttachment{}},
	}
}

// holdingRank orders one pid's holdings of a program by what its Via
// says: its own fd, a link, a perf_event fd.
func holdingRank(h Holding) int {
	switch {
	case h.Perf:
		return 2
	case h.LinkID != 0:
		return 1
	}
	return 0
}

// holdingOrder sorts holdings so that one pid's are adjacent and its "fd"
// holding of a program comes before its link holdings, and those before
// its perf_event fds.
func holdingOrder(a, b Holding) int {
	if a.PID != b.PID {
		return cmp.Compare(a.PID, b.PID)
	}
	if ra, rb := holdingRank(a), holdingRank(b); ra != rb {
		return cmp.Compare(ra, rb)
	}
	if a.LinkID != b.LinkID {
		return cmp.Compare(a.LinkID, b.LinkID)
	}
	return cmp.Compare(a.FD, b.FD)
}

// sortHoldings sorts hs by holdingOrder. Both sources list processes by
// pid and a process's fds by number already: only the fds of a process
// that holds links as well as programs (the agent itself: its iterators)
// may need sorting, so a pid-ordered list is sorted pid by pid, each pid's
// only when it is out of order (the sort of 1,000 holdings was most of the
// scan's own work).
func sortHoldings(hs []Holding) {
	if !slices.IsSortedFunc(hs, func(a, b Holding) int { return cmp.Compare(a.PID, b.PID) }) {
		// A thread with a file table of its own, listed under its process.
		slices.SortFunc(hs, holdingOrder)
		return
	}
	for i := 0; i < len(hs); {
		j := i + 1
		for j < len(hs) && hs[j].PID == hs[i].PID {
			j++
		}
		if g := hs[i:j]; !slices.IsSortedFunc(g, holdingOrder) {
			slices.SortFunc(g, holdingOrder)
		}
		i = j
	}
}

// Scan lists every holder of a BPF program or link fd. want, when not nil,
// limits the result to the programs it returns true for (the others cost
// only their fdinfo read). An error means the source failed as a whole;
// vanished processes and denied reads are counted in Result.Stats.
//
// A program whose owners equal the last scan's gets the very same slice in
// Programs (same array, same length); one whose owners changed gets a new
// array. No slice handed out is written again, so a caller may keep them
// and tell an unchanged program by its slice alone.
//
// Scan sees this process too, holding whatever it has open at that
// instant: a caller that opens BPF objects for a moment meanwhile (a
// program read by id) scans with WalkOthers and Finish instead.
func (s *Scanner) Scan(want func(progID uint32) bool) (*Result, error) {
	t0 := time.Now()
	s.begin()
	var err error
	s.holdings, err = s.src.Holdings(s.holdings[:0], &s.res.Stats)
	if err != nil {
		return nil, err
	}
	return s.build(want, t0, 0), nil
}

// WalkOthers is the first half of a Scan, made while this process opens
// BPF objects for a moment (the agent's program and link reads by id:
// GET_FD_BY_ID, info, close): it lists the holdings of every process but
// this one, which would be seen holding whatever it had open at that
// instant. Finish, called once those fds are closed, lists this
// process's own fds (a few: one process's walk) and completes the Scan.
func (s *Scanner) WalkOthers() {
	t0 := time.Now()
	s.begin()
	self := s.selfPID()
	ps, walksProc := s.src.(*ProcSource)
	if walksProc {
		ps.skip = self
	}
	s.holdings, s.walkErr = s.src.Holdings(s.holdings[:0], &s.res.Stats)
	if walksProc {
		ps.skip = 0
	}
	if !walksProc && self != 0 {
		s.holdings = slices.DeleteFunc(s.holdings, func(h Holding) bool { return h.PID == self })
	}
	s.walked, s.walkTime = true, time.Since(t0)
}

// Finish completes the Scan WalkOthers began: it adds this process's
// holdings as they are now, then answers as Scan. The caller must have
// closed every BPF fd it opened for a moment since WalkOthers began:
// whatever this process holds now is its own.
func (s *Scanner) Finish(want func(progID uint32) bool) (*Result, error) {
	if !s.walked {
		return nil, errors.New("owners: Finish without WalkOthers")
	}
	s.walked = false
	if s.walkErr != nil {
		return nil, s.walkErr
	}
	t0 := time.Now()
	if self := s.selfPID(); self != 0 {
		if s.selfSrc == nil {
			if ps, ok := s.src.(*ProcSource); ok {
				s.selfSrc = ps
			} else {
				s.selfSrc = NewProcSource(s.procRoot)
			}
		}
		s.selfBuf = s.selfSrc.holdingsOf(self, s.selfBuf[:0], &s.res.Stats)
		// In pid order, as the sources list processes.
		i := slices.IndexFunc(s.holdings, func(h Holding) bool { return h.PID > self })
		if i < 0 {
			i = len(s.holdings)
		}
		s.holdings = slices.Insert(s.holdings, i, s.selfBuf...)
	}
	return s.build(want, t0, s.walkTime), nil
}

// selfPID is this process's pid as procRoot numbers it (procRoot/self), 0
// where that procfs does not show it.
func (s *Scanner) selfPID() int32 {
	if !s.selfKnown {
		s.selfKnown = true
		if l, err := os.Readlink(s.procRoot + "/self"); err == nil {
			if pid, ok := parseUint32([]byte(l)); ok && pid > 0 && pid <= 1<<31-1 {
				s.self = int32(pid)
			}
		}
	}
	return s.self
}

// begin starts a scan's result afresh.
func (s *Scanner) begin() {
	r := &s.res
	r.Stats, r.Duration = Stats{}, 0
	clear(r.Links)
	clear(r.LinkProgs)
	clear(r.Perf)
	s.walked, s.walkErr = false, nil
}

// build makes the Result of s.holdings; t0 is when this part of the scan
// began, before the time it took before (WalkOthers').
func (s *Scanner) build(want func(progID uint32) bool, t0 time.Time, before time.Duration) *Result {
	r := &s.res
	s.gen++
	sortHoldings(s.holdings)
	for i := range s.holdings {
		if h := &s.holdings[i]; h.Perf {
			s.queryPerf(h, want, &r.Stats)
		}
	}
	// Holdings are sorted by pid: a process's facts are checked once per
	// scan, however many fds it holds, and a program's owners come in pid
	// order, so a pid's second holding of a program is its last owner's.
	lastPID, lastFacts := int32(-1), (*procFacts)(nil)
	for _, h := range s.holdings {
		if h.LinkID != 0 {
			r.LinkProgs[h.LinkID] = h.ProgID
			if pids := r.Links[h.LinkID]; len(pids) == 0 || pids[len(pids)-1] != int(h.PID) {
				r.Links[h.LinkID] = append(pids, int(h.PID))
			}
		}
		if h.ProgID == 0 || (want != nil && !want(h.ProgID)) {
			continue
		}
		if h.PID != lastPID {
			lastPID, lastFacts = h.PID, s.facts(h.PID, &r.Stats)
		}
		pf := lastFacts
		if pf == nil {
			continue // exited since its fds were read
		}
		e := s.progs[h.ProgID]
		if e == nil {
			e = &progOwners{}
			s.progs[h.ProgID] = e
		}
		if e.gen != s.gen {
			e.gen, e.n, e.fresh = s.gen, 0, nil
		}
		if e.lastPID() == int(h.PID) {
			// The pid's first holding decided Via (its fd, if any, else
			// a link): a program held by a link and by the perf_event
			// fd beside it has this owner once.
			continue
		}
		o := Owner{
			PID: int(h.PID), Comm: pf.comm, Exe: pf.exe, Cgroup: pf.cgroup,
			ContainerID: pf.c.ID, Runtime: pf.c.Runtime, PodUID: pf.c.PodUID,
			Via: ViaFD,
		}
		switch {
		case h.Perf:
			o.Via = ViaPerfEvent
		case h.LinkID != 0:
			o.Via = ViaLink
		}
		e.add(o)
	}
	for id, e := range s.progs {
		switch {
		case e.gen != s.gen: // no owner any more
			delete(s.progs, id)
			delete(r.Programs, id)
			continue
		case e.fresh != nil:
			e.owners, e.fresh = e.fresh, nil
		case e.n < len(e.owners): // the first n are the same
			e.owners = slices.Clone(e.owners[:e.n])
		default:
			continue
		}
		r.Programs[id] = e.owners
	}
	for pid, pf := range s.cache {
		if pf.gen != s.gen {
			delete(s.cache, pid)
		}
	}
	r.Duration = before + time.Since(t0)
	return r
}

// queryPerf asks the kernel what perf_event fd h carries (BPF_TASK_FD_QUERY)
// and notes it in the result: h.ProgID becomes the program, 0 where there
// is none to record. Only perf_event fds are asked about, so a node
// without them pays nothing. The query takes a pid of our own namespace:
// with the procfs of another (a host /proc without hostPID), the pids the
// source gave are not ours, and perf_event fds are left out.
func (s *Scanner) queryPerf(h *Holding, want func(uint32) bool, st *Stats) {
	if !s.perfKnown {
		s.perfQuery, s.perfKnown = samePidNamespace(s.procRoot), true
	}
	listed := h.ProgID // the iterator's answer; 0 from /proc
	h.ProgID = 0
	if !s.perfQuery {
		return
	}
	st.PerfFDs++
	q, err := bpfsys.TaskFDQuery(int(h.PID), int(h.FD), &s.nameBuf)
	a := PerfAttachment{PID: int(h.PID), FD: int(h.FD), Query: q, Known: err == nil}
	switch {
	case err == nil:
	case errors.Is(err, ebpf.ErrNotSupported) && listed != 0:
		// A perf_event program on a hardware or software event: the
		// kernel does not describe it, but the iterator named it.
		a.Query.ProgID = listed
	case errors.Is(err, unix.ENOENT) && listed == 0:
		return // a perf event without a program: not ours
	case errors.Is(err, unix.ENOENT), errors.Is(err, unix.EBADF):
		st.Vanished++ // detached, closed or exited since it was listed
		return
	case errors.Is(err, ebpf.ErrNotSupported):
		return // the /proc walk cannot tell its program
	default:
		st.count(err, "asking what perf_event fd "+itoa(h.FD)+" of pid "+itoa(h.PID)+" carries")
		return
	}
	st.PerfProgs++
	h.ProgID = a.Query.ProgID
	if h.ProgID == 0 || (want != nil && !want(h.ProgID)) {
		return
	}
	s.res.Perf[h.ProgID] = append(s.res.Perf[h.ProgID], a)
}

// facts returns the cached facts of pid, re-read when the pid now names
// another process (its start time changed). nil when the process is gone.
func (s *Scanner) facts(pid int32, st *Stats) *procFacts {
	dir := s.procRoot + "/" + itoa(pid)
	stat, err := s.read(dir + "/stat")
	if err != nil {
		st.count(err, "reading stat of pid "+itoa(pid))
		return nil
	}
	start, ok := parseStatStart(stat)
	if !ok {
		st.Errors++
		st.LastError = "unparsable " + dir + "/stat"
		return nil
	}
	if pf := s.cache[pid]; pf != nil && pf.start == start {
		pf.gen = s.gen
		return pf
	}
	pf := &procFacts{start: start, gen: s.gen}
	if b, err := s.read(dir + "/comm"); err == nil {
		pf.comm = strings.TrimSuffix(string(b), "\n")
	} else {
		st.count(err, "reading comm of pid "+itoa(pid))
	}
	// exe and cgroup are best effort: kernel threads have no exe, and a
	// process may exit between the reads.
	if exe, err := os.Readlink(dir + "/exe"); err == nil {
		pf.exe = exe
	} else if errors.Is(err, fs.ErrPermission) { // a ptrace-mode check
		st.count(err, "reading exe of pid "+itoa(pid))
	}
	if b, err := s.read(dir + "/cgroup"); err == nil {
		pf.c, pf.cgroup = ContainerOf(ParseProcCgroup(b))
	}
	s.cache[pid] = pf
	return pf
}

func (s *Scanner) read(path string) ([]byte, error) { return readFile(path, &s.buf) }

// readFile reads a small file into *buf, growing it as needed, and returns
// the bytes read. procfs and bpffs files are read with one buffer per
// scanner, never one allocation per file.
func readFile(path string, buf *[]byte) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := *buf
	n := 0
	for {
		if n == len(b) {
			b = append(b, make([]byte, max(len(b), 512))...)
			*buf = b
		}
		m, err := f.Read(b[n:])
		n += m
		if err == io.EOF || m == 0 && err == nil {
			return b[:n], nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// parseStatStart returns field 22 of /proc/PID/stat, the start time in clock
// ticks since boot. comm (field 2) may contain spaces and parentheses, so
// fields are counted from the last ')'.
func parseStatStart(b []byte) (uint64, bool) {
	i := len(b) - 1
	for i >= 0 && b[i] != ')' {
		i--
	}
	if i < 0 {
		return 0, false
	}
	b = b[i+1:]
	field := 2
	for len(b) > 0 {
		for len(b) > 0 && b[0] == ' ' {
			b = b[1:]
		}
		j := 0
		for j < len(b) && b[j] != ' ' {
			j++
		}
		field++
		if field == 22 {
			return bpfsys.ParseUint64(b[:j])
		}
		b = b[j:]
	}
	return 0, false
}
