package stats

import (
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"golang.org/x/sys/unix"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/sysfile"
)

// Ctl switches the agent's BPF_ENABLE_STATS holder on and off as the
// mode says. In sampled mode it also keeps the record a sampled estimate
// needs (statsLine): when the agent held its fd, and what a look at the
// kernel without it found (another holder keeping stats on, or not), made
// right before and after each window, every lookEvery between windows and
// at every scan. The kernel counts runs only while some holder exists, so
// the runs counted over a stretch divided by the time the kernel counted
// is the run rate.
type Ctl struct {
	mode           config.StatsMode
	window, period time.Duration
	now            func() time.Time

	mu      sync.Mutex
	holder  *statsHolder // open fd, nil while off
	lastErr error
	paused  bool
	// elsewhere is what the last look found: stats on while the agent
	// held no fd.
	elsewhere bool
	canary    *ebpf.Program // a no-op program test-run to see whether stats are on
	line      *statsLine    // sampled mode only

	stop chan struct{}
	done chan struct{}
}

// lookEvery is how often sampled mode looks for another holder between
// its windows (a look is three bpf() calls): a holder that comes and goes
// unseen within it counts in the next window's rate as if the agent had
// counted those runs.
const lookEvery = time.Second

// NewCtl starts controlling stats as mode says (sampled: window of each
// period, timed by now).
func NewCtl(mode config.StatsMode, window, period time.Duration, now func() time.Time) *Ctl {
	if window <= 0 {
		window = config.DefaultStatsWindow
	}
	if period <= 0 {
		period = config.DefaultStatsPeriod
	}
	if window > period {
		window = period
	}
	c := &Ctl{mode: mode, window: window, period: period, now: now}
	switch mode {
	case config.StatsAlways:
		c.open()
	case config.StatsSampled:
		c.line = newStatsLine(now())
		c.stop, c.done = make(chan struct{}), make(chan struct{})
		go c.sample()
	}
	return c
}

// Window is sampled mode's window: stats on for Window of each period.
func (c *Ctl) Window() time.Duration { return c.window }

// Held says whether the agent holds its BPF_ENABLE_STATS fd now.
func (c *Ctl) Held() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.holder != nil
}

// On says whether the kernel counts run time now, without a Ctl: one look
// (the canary's test run), for callers that need stats off.
func On() (bool, error) {
	c := &Ctl{}
	defer c.Close()
	return c.statsOnLocked()
}

// open takes a stats fd unless one is held or the controller is paused.
func (c *Ctl) open() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.openLocked()
}

func (c *Ctl) openLocked() {
	if c.holder != nil || c.paused {
		return
	}
	h := enableStats()
	if h.err != nil {
		c.lastErr = h.err
		return
	}
	c.lastErr = nil
	c.holder = h
	c.record(statsEvent{t: c.now(), held: true})
}

func (c *Ctl) closeFd() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
}

func (c *Ctl) closeLocked() {
	if c.holder == nil {
		return
	}
	c.holder.close()
	c.holder = nil
	c.record(statsEvent{t: c.now()})
}

// record adds e to the sampled mode's line.
func (c *Ctl) record(e statsEvent) {
	if c.line != nil {
		c.line.add(e)
	}
}

// lookLocked looks whether stats are on without the agent, unless it
// holds its fd (then stats are on whoever else holds them) or is paused
// (the calibration switches stats itself).
func (c *Ctl) lookLocked() {
	if c.holder != nil || c.paused {
		return
	}
	on, err := c.statsOnLocked()
	l := lookUnknown
	if err == nil {
		c.elsewhere = on
		l = lookOff
		if on {
			l = lookOn
		}
	}
	c.record(statsEvent{t: c.now(), look: l})
}

// sample opens a window at the start of each period, looking for another
// holder before and after it and every lookEvery between windows.
func (c *Ctl) sample() {
	defer close(c.done)
	for {
		c.mu.Lock()
		c.lookLocked()
		c.openLocked()
		c.mu.Unlock()
		if !c.wait(c.window) {
			c.closeFd()
			return
		}
		c.mu.Lock()
		c.closeLocked()
		c.lookLocked()
		c.mu.Unlock()
		for off := c.period - c.window; off > 0; {
			step := min(off, lookEvery)
			if !c.wait(step) {
				return
			}
			if off -= step; off > 0 {
				c.mu.Lock()
				c.lookLocked()
				c.mu.Unlock()
			}
		}
	}
}

// wait sleeps d, false when the controller is closed meanwhile.
func (c *Ctl) wait(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-c.stop:
		return false
	case <-t.C:
		return true
	}
}

func (c *Ctl) statsOnLocked() (bool, error) {
	if c.canary == nil {
		p, err := ebpf.NewProgram(&ebpf.ProgramSpec{
			Name: "bpfleet_statson", Type: ebpf.SocketFilter, License: "GPL",
			Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
		})
		if err != nil {
			return false, fmt.Errorf("loading the stats canary: %w", err)
		}
		c.canary = p
	}
	before, err := c.canary.Stats()
	if err != nil {
		return false, err
	}
	if _, err := c.canary.Run(&ebpf.RunOptions{Data: make([]byte, 14)}); err != nil {
		return false, fmt.Errorf("test-running the stats canary: %w", err)
	}
	after, err := c.canary.Stats()
	if err != nil {
		return false, err
	}
	return after.RunCount > before.RunCount, nil
}

// pause releases the agent's fd (the stats tax calibration needs stats
// off) until resume.
func (c *Ctl) pause() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
	c.lookLocked() // what stats were until now
	c.paused = true
	// Until resume the calibration switches stats on and off itself.
	c.record(statsEvent{t: c.now(), look: lookUnknown})
}

func (c *Ctl) resume() {
	if c == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.paused = false
	switch c.mode {
	case config.StatsAlways:
		c.openLocked()
	case config.StatsSampled:
		c.lookLocked()
	}
}

// setElsewhere records what a measurement found out about other holders.
func (c *Ctl) setElsewhere(v bool) {
	if c == nil {
		return
	}
	c.mu.Lock()
	c.elsewhere = v
	c.mu.Unlock()
}

// Coverage hands a scan the record of its interval (sampled mode; zero
// otherwise), its events copied into buf.
func (c *Ctl) Coverage(buf []statsEvent) coverage {
	if c == nil || c.line == nil {
		return coverage{}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.line.take(c.now(), buf)
}

// State is the stats state, sysctl the value of kernel.bpf_stats_enabled.
func (c *Ctl) State(sysctl int) StatsState {
	st := StatsState{Sysctl: sysctl}
	if c == nil {
		st.Enabled = st.Sysctl > 0
		return st
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	st.Mode = c.mode
	if c.mode == config.StatsSampled {
		st.Window, st.Period = c.window, c.period
	}
	st.HeldByAgent = c.holder != nil
	if c.lastErr != nil {
		st.Error = c.lastErr.Error()
	}
	if c.mode != config.StatsAlways {
		// Off and sampled modes look at each scan (three cheap bpf()
		// calls): the scan's interval ends with what stats are now.
		c.lookLocked()
	}
	st.HeldElsewhere = c.elsewhere || st.Sysctl > 0
	st.Enabled = st.HeldByAgent || st.HeldElsewhere || (c.mode == config.StatsSampled && c.lastErr == nil)
	if c.mode == config.StatsAlways && (st.HeldByAgent || st.HeldElsewhere) {
		st.Counts = CountsExact // sampled mode: the scan's coverage says
	}
	return st
}

// Err is why the agent could not enable stats the last time it tried.
func (c *Ctl) Err() error {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lastErr
}

// Close releases the fd and stops the sampled windows.
func (c *Ctl) Close() {
	if c == nil {
		return
	}
	if c.stop != nil {
		close(c.stop)
		<-c.done
		c.stop = nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.closeLocked()
	if c.canary != nil {
		c.canary.Close()
		c.canary = nil
	}
}

// SysctlReader reads kernel.bpf_stats_enabled (parsed by sysfile.Int, as
// bench.StatsSysctl does) through one fd it keeps open: a pread per scan
// instead of os.ReadFile's
// open, fstat, two reads and close, which cost a scan of 1,000 idle
// programs as much as comparing all of them.
type SysctlReader struct {
	path string
	fd   int // -1: not open
	buf  [24]byte
}

// NewSysctlReader reads procRoot's kernel.bpf_stats_enabled, opened on
// first read.
func NewSysctlReader(procRoot string) *SysctlReader {
	return &SysctlReader{path: procRoot + "/sys/kernel/bpf_stats_enabled", fd: -1}
}

// Read returns the value, -1 when unreadable.
func (s *SysctlReader) Read() int {
	if s.fd < 0 {
		fd, err := unix.Open(s.path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1
		}
		s.fd = fd
	}
	n, err := unix.Pread(s.fd, s.buf[:], 0)
	if err != nil {
		s.Close() // opened again at the next scan
		return -1
	}
	return sysfile.Int(s.buf[:max(n, 0)])
}

// Close closes the kept fd.
func (s *SysctlReader) Close() {
	if s != nil && s.fd >= 0 {
		unix.Close(s.fd)
		s.fd = -1
	}
}
