package main

import (
	"github.com/spf13/cobra"

	"github.com/bpfleet/bpfleet/agent"
	"github.com/bpfleet/bpfleet/internal/config"
)

// registerStatsFlags binds the agent's --stats, --stats-window,
// --stats-period, --profile, --profile-window and --profile-period to c
// (internal/config validates them with the rest).
func registerStatsFlags(cmd *cobra.Command, c *config.Agent) {
	f := cmd.Flags()
	f.StringVar((*string)(&c.Stats.Mode), "stats", string(c.Stats.Mode), "BPF run-time stats: always (exact, taxes every run of every program), sampled (on for --stats-window of every --stats-period, counts scaled) or off (misses, attach types and owners only)")
	f.DurationVar(&c.Stats.Window, "stats-window", c.Stats.Window, "with --stats=sampled: how long stats stay on in each period")
	f.DurationVar(&c.Stats.Period, "stats-period", c.Stats.Period, "with --stats=sampled: how often a stats window opens")
	f.StringSliceVar(&c.Profile.Selectors, "profile", nil, "programs to time with fentry/fexit (probes/profiler), exported as a histogram: "+config.ProfileSelectors+" (comma separated)")
	f.DurationVar(&c.Profile.Window, "profile-window", c.Profile.Window, "with --profile: time runs only for this window of every --profile-period (runs stay exactly counted; outside windows a run pays one fentry, less than the stats tax); 0: time every run (2.8-4.5x the stats tax per profiled run under TCG)")
	f.DurationVar(&c.Profile.Period, "profile-period", c.Profile.Period, "with --profile-window: how often a timing window opens")
}

// applyStats maps the validated stats and profile settings to the agent's
// configuration.
func applyStats(c config.Agent, cfg *agent.Config) {
	cfg.StatsMode, cfg.StatsWindow, cfg.StatsPeriod = c.Stats.Mode, c.Stats.Window, c.Stats.Period
	cfg.Profile, cfg.ProfileWindow, cfg.ProfilePeriod = c.Profile.Selectors, c.Profile.Window, c.Profile.Period
}
