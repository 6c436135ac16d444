package config

import (
	"errors"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// List is `bpfleet list`'s configuration.
type List struct {
	Scan     Scan
	Output   string // table, json or jsonl
	Pretty   bool
	Watch    bool
	Interval time.Duration
	Count    int
	// IntervalSet and CountSet say the flags were given: without --watch
	// they would be ignored, which is a mistake worth saying.
	IntervalSet, CountSet bool
}

// Validate checks every flag.
func (c *List) Validate() error {
	return errors.Join(append([]error{c.Scan.Validate()}, validateWatch(c.Output, c.Watch, c.Interval, c.Count, c.IntervalSet, c.CountSet)...)...)
}

// validateWatch checks the output and --watch flags list and maps share.
func validateWatch(output string, watch bool, interval time.Duration, count int, intervalSet, countSet bool) []error {
	var errs []error
	if !slices.Contains([]string{"table", "json", "jsonl"}, output) {
		errs = append(errs, problem("--output", output, "want table, json or jsonl"))
	}
	if watch {
		if interval < MinToolInterval {
			errs = append(errs, problem("--interval", interval.String(), "want at least %v", MinToolInterval))
		}
		if count < 0 {
			errs = append(errs, problem("--count", strconv.Itoa(count), "want 0 (until interrupted) or a positive number of intervals"))
		}
	} else {
		if intervalSet {
			errs = append(errs, problem("--interval", interval.String(), "only used with --watch: add --watch or drop it"))
		}
		if countSet {
			errs = append(errs, problem("--count", strconv.Itoa(count), "only used with --watch: add --watch or drop it"))
		}
	}
	return errs
}

// MapSorts are the orders `bpfleet maps --sort` accepts (agent/mapview's
// Sorts, which a test holds to this list).
var MapSorts = []string{"memory", "fullness", "entries", "evictions", "refused", "id", "name"}

// Maps is `bpfleet maps`' configuration.
type Maps struct {
	List // the scan, output and --watch flags, as list has them
	Sort string
	Type string // keep maps of this type
	Prog int64  // keep the maps this program uses; 0: all
	// Refusals is --refusals: with Watch, count refused updates too.
	Refusals bool
}

// Validate checks every flag.
func (c *Maps) Validate() error {
	errs := []error{c.List.Validate()}
	if c.Scan.NoMaps {
		errs = append(errs, problem("--no-maps", "true", "bpfleet maps reads the maps: drop it"))
	}
	if !slices.Contains(MapSorts, c.Sort) {
		errs = append(errs, problem("--sort", c.Sort, "want one of %s", strings.Join(MapSorts, ", ")))
	}
	if c.Prog < 0 || c.Prog > 1<<32-1 {
		errs = append(errs, problem("--prog", strconv.FormatInt(c.Prog, 10), "want a program id from 1 to 4294967295 (0: every map)"))
	}
	return errors.Join(errs...)
}

// TopSorts are the columns `bpfleet top --sort` accepts.
var TopSorts = []string{"cpu", "runs", "misses", "nsrun", "mem", "id", "name"}

// Top is `bpfleet top`'s configuration.
type Top struct {
	Scan      Scan
	Interval  time.Duration
	Remote    string
	TokenFile string
	Sort      string
	Filter    string
	Count     int
	// Profile is --profile: programs timed (every run) beside the list.
	Profile []string
	// Token is read by Resolve from TokenFile or $BPFLEET_API_TOKEN.
	Token string
}

// Resolve reads the token and validates the whole.
func (c *Top) Resolve(env Lookup) error {
	var errs []error
	switch {
	case c.TokenFile != "" && c.Remote == "":
		errs = append(errs, problem("--token-file", c.TokenFile, "only used with --remote: add --remote URL or drop it"))
	case c.TokenFile != "":
		b, err := os.ReadFile(c.TokenFile)
		if err != nil {
			errs = append(errs, problem("--token-file", c.TokenFile, "%s: want a readable file holding the agent API's bearer token", statReason(err)))
		} else if c.Token = strings.TrimSpace(string(b)); len(c.Token) < MinTokenLen {
			errs = append(errs, problem("--token-file", c.TokenFile, "the token is %d bytes: the agent's API takes at least %d", len(c.Token), MinTokenLen))
		}
	case c.Remote != "":
		v, _ := env("BPFLEET_API_TOKEN")
		c.Token = strings.TrimSpace(v)
	}
	return errors.Join(append(errs, c.Validate())...)
}

// Validate checks every flag.
func (c *Top) Validate() error {
	var errs []error
	if c.Remote == "" {
		errs = append(errs, c.Scan.Validate())
	} else if err := checkAgentURL(c.Remote); err != "" {
		errs = append(errs, problem("--remote", c.Remote, "%s", err))
	}
	if c.Interval < MinToolInterval {
		errs = append(errs, problem("--interval", c.Interval.String(), "want at least %v", MinToolInterval))
	}
	if !slices.Contains(TopSorts, c.Sort) {
		errs = append(errs, problem("--sort", c.Sort, "want one of %s", strings.Join(TopSorts, ", ")))
	}
	if c.Count < 0 {
		errs = append(errs, problem("--count", strconv.Itoa(c.Count), "want 0 (until interrupted) or a positive number of intervals"))
	}
	errs = append(errs, Profile{Selectors: c.Profile}.validate("--profile", "", "")...)
	return errors.Join(errs...)
}

// Profiler is `bpfleet profile`'s configuration: the programs to time are
// its PROG arguments, the window --window of every --period.
type Profiler struct {
	Scan     Scan
	Interval time.Duration
	Count    int
	Profile  Profile
}

// Validate checks every flag and argument.
func (c *Profiler) Validate() error {
	errs := []error{c.Scan.Validate()}
	if c.Interval < MinToolInterval {
		errs = append(errs, problem("--interval", c.Interval.String(), "want at least %v", MinToolInterval))
	}
	if c.Count < 0 {
		errs = append(errs, problem("--count", strconv.Itoa(c.Count), "want 0 (until interrupted) or a positive number of intervals"))
	}
	errs = append(errs, c.Profile.validate("PROG", "--window", "--period")...)
	return errors.Join(errs...)
}

func checkAgentURL(v string) string {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "not a URL: want the agent's API, e.g. http://10.0.0.7:9808"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL of the agent's API, e.g. http://10.0.0.7:9808"
	case u.Hostname() == "":
		return "no host: want e.g. http://10.0.0.7:9808"
	case u.Port() != "" && !validPort(u.Port()):
		return "bad port: want a number from 1 to 65535"
	}
	return ""
}

// Probe is `bpfleet probe`'s configuration.
type Probe struct {
	Output string
}

// Validate checks every flag.
func (c *Probe) Validate() error {
	if c.Output != "table" && c.Output != "json" {
		return problem("--output", c.Output, "want table or json")
	}
	return nil
}

// Bench is `bpfleet bench`'s configuration. Its attach types, mode and
// stats are probes/bench's and probes/catalog's enums, checked next to the
// command (cmd/bpfleet/bench.go) so that this package imports no probe
// package; Validate checks the rest.
type Bench struct {
	AttachTypes string // comma separated
	Mode        string
	Stats       string
	Calls       int
	Rounds      int
	Batch       int
	Output      string
}

// Validate checks the counts and the output format.
func (c *Bench) Validate() error {
	var errs []error
	for _, f := range []struct {
		name string
		v    int
		min  int
	}{{"--calls", c.Calls, 0}, {"--rounds", c.Rounds, 1}, {"--batch", c.Batch, 1}} {
		if f.v < f.min {
			errs = append(errs, problem(f.name, strconv.Itoa(f.v), "want at least %d", f.min))
		}
	}
	if c.Output != "table" && c.Output != "json" {
		errs = append(errs, problem("--output", c.Output, "want table or json"))
	}
	return errors.Join(errs...)
}

// Misses is `bpfleet misses`' configuration: the programs to watch are
// its PROG arguments (as `bpfleet profile` selects them).
type Misses struct {
	Scan     Scan
	Programs []string // PROG...: id, name, or a selector (ProfileSelectors)
	Output   string   // table, json or jsonl
	Watch    bool
	Interval time.Duration
	Count    int
	Remote   string
	// TokenFile is --token-file; Token is read by Resolve from it or
	// $BPFLEET_API_TOKEN.
	TokenFile string
	Token     string
}

// Resolve reads the token and validates the whole.
func (c *Misses) Resolve(env Lookup) error {
	t := Top{Scan: c.Scan, Interval: c.Interval, Remote: c.Remote, TokenFile: c.TokenFile, Sort: TopSorts[0], Count: c.Count}
	var errs []error
	if err := t.Resolve(env); err != nil {
		errs = append(errs, err)
	}
	c.Token = t.Token
	if !slices.Contains([]string{"table", "json", "jsonl"}, c.Output) {
		errs = append(errs, problem("--output", c.Output, "want table, json or jsonl"))
	}
	errs = append(errs, Profile{Selectors: c.Programs}.validate("PROG", "", "")...)
	return errors.Join(errs...)
}
