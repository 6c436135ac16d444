package config

import (
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/bpfleet/bpfleet/internal/apiconst"
)

// StatsMode is the agent's --stats: how long it keeps BPF run-time stats
// on.
type StatsMode string

const (
	// StatsAlways holds a BPF_ENABLE_STATS fd for the agent's life: exact
	// run counts and run time, and the stats tax on every run of every
	// program on the node.
	StatsAlways StatsMode = "always"
	// StatsSampled holds the fd for a window of each period; run counts
	// and run time are scaled from the windows.
	StatsSampled StatsMode = "sampled"
	// StatsOff never enables stats: misses, attach types and owners only.
	StatsOff StatsMode = "off"
)

// Valid reports whether m is one of the modes.
func (m StatsMode) Valid() bool {
	return m == StatsAlways || m == StatsSampled || m == StatsOff
}

// Sampling defaults: stats on 1 s of every 10 s.
const (
	DefaultStatsWindow = time.Second
	DefaultStatsPeriod = 10 * time.Second
)

// Stats is the agent's --stats, --stats-window and --stats-period.
type Stats struct {
	Mode StatsMode
	// Window of every Period is when sampled mode holds stats on.
	Window, Period time.Duration
}

// DefaultStats is the flags' defaults.
func DefaultStats() Stats {
	return Stats{Mode: StatsAlways, Window: DefaultStatsWindow, Period: DefaultStatsPeriod}
}

func (s Stats) validate() []error {
	var errs []error
	if !s.Mode.Valid() {
		errs = append(errs, problem("--stats", string(s.Mode), "want always (exact counts, every run taxed), sampled (on for --stats-window of every --stats-period) or off"))
	}
	if s.Mode != StatsSampled {
		return errs
	}
	switch {
	case s.Window <= 0:
		errs = append(errs, problem("--stats-window", s.Window.String(), "want a positive duration, at most --stats-period"))
	case s.Period > 0 && s.Window > s.Period:
		errs = append(errs, problem("--stats-window", s.Window.String(), "longer than --stats-period=%v: want at most the period", s.Period))
	}
	if s.Period <= 0 {
		errs = append(errs, problem("--stats-period", s.Period.String(), "want a positive duration, at least --stats-window"))
	}
	return errs
}

// Profile is what the fentry/fexit profiler times: the programs selected
// (--profile, or `bpfleet profile`'s arguments) and when their runs are
// timed (Window of every Period; no window: every run).
type Profile struct {
	Selectors      []string
	Window, Period time.Duration
}

// DefaultProfile is the agent's --profile-window and --profile-period.
func DefaultProfile() Profile {
	return Profile{Window: time.Second, Period: 10 * time.Second}
}

// ProfileSelectors says what a selector may be.
const ProfileSelectors = "id:N, name:S, tag:S, attach:S (attach type), owner:S (process name, container id or pod name) or a bare word matching any of them"

// validate checks p, naming the settings as the command spells them.
func (p Profile) validate(selectors, window, period string) []error {
	var errs []error
	for _, s := range p.Selectors {
		if why := selectorProblem(s); why != "" {
			errs = append(errs, problem(selectors, s, "%s: want %s", why, ProfileSelectors))
		}
	}
	switch {
	case p.Window < 0:
		errs = append(errs, problem(window, p.Window.String(), "want a positive duration, or 0 to time every run"))
	case p.Window > 0 && p.Period <= p.Window:
		errs = append(errs, problem(window, p.Window.String(), "not shorter than %s=%v: want a window shorter than its period, or 0 to time every run", period, p.Period))
	}
	return errs
}

func selectorProblem(s string) string {
	k, v, ok := strings.Cut(s, ":")
	switch {
	case !ok && s == "":
		return "empty"
	case !ok:
		return ""
	case k == "id":
		if _, err := strconv.ParseUint(v, 10, 32); err != nil {
			return "the id is not a program id"
		}
	case k == "name" || k == "tag" || k == "attach" || k == "owner":
		if v == "" {
			return "empty value"
		}
	default:
		return "unknown kind " + quote(k)
	}
	return ""
}

// checkPprof refuses a --pprof that is not a loopback host:port: profiles
// show the process's memory and code paths, and nothing on them is
// authenticated.
func checkPprof(addr string) error {
	const name, want = "--pprof", "want a loopback host:port such as 127.0.0.1:6060 (profiles are not authenticated), or empty for none"
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	switch {
	case err != nil:
		return problem(name, addr, "not host:port: %s", want)
	case !validPort(port) && port != "0":
		return problem(name, addr, "port %s: %s", quote(port), want)
	case !apiconst.IsLoopback(host):
		return problem(name, addr, "not loopback: %s", want)
	}
	return nil
}
