package config

import (
	"errors"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// FleetSorts are the orders `bpfleet fleet top --sort` accepts.
var FleetSorts = []string{"cpu", "nsrun", "misses", "nodes", "name"}

// MinFleetInterval is the shortest `fleet --watch` refresh: each refresh
// asks the backend several range questions over the whole fleet, and the
// agents export every 10 s.
const MinFleetInterval = time.Second

// MinFleetRange is the shortest --since and --window: rates and states
// need two exports of an agent in them (the agents export every 10 s by
// default, so the defaults are minutes; seconds suit agents exporting
// faster, as the tests' do).
const MinFleetRange = 2 * time.Second

// Fleet is the configuration every `bpfleet fleet` subcommand shares: the
// query API, its token and TLS files, and the output.
type Fleet struct {
	Prometheus string // the query API's base URL
	TokenFile  string // bearer token (default $BPFLEET_PROMETHEUS_TOKEN)
	CAFile     string
	CertFile   string
	KeyFile    string
	Insecure   bool // --insecure-skip-verify
	Job        string
	Pool       string // the target_info label naming the node pool
	Since      time.Duration
	Window     time.Duration // per-node states and "since when" look this far back
	Timeout    time.Duration // one refresh's questions
	Output     string        // table or json
	Watch      bool
	Interval   time.Duration
	Count      int
	Limit      int
	Sort       string // top only
	// IntervalSet and CountSet say the flags were given (see List).
	IntervalSet, CountSet bool
	// Token is read by Resolve from TokenFile or $BPFLEET_PROMETHEUS_TOKEN.
	Token string
}

// FleetTokenEnv holds the query API's bearer token when --token-file is
// not given.
const FleetTokenEnv = "BPFLEET_PROMETHEUS_TOKEN"

// Resolve reads the token and validates the whole.
func (c *Fleet) Resolve(env Lookup) error {
	var errs []error
	if c.TokenFile != "" {
		b, err := os.ReadFile(c.TokenFile)
		switch {
		case err != nil:
			errs = append(errs, problem("--token-file", c.TokenFile, "%s: want a readable file holding the query API's bearer token", statReason(err)))
		case strings.TrimSpace(string(b)) == "":
			errs = append(errs, problem("--token-file", c.TokenFile, "the file is empty: want the query API's bearer token"))
		default:
			c.Token = strings.TrimSpace(string(b))
		}
	} else if v, ok := env(FleetTokenEnv); ok {
		c.Token = strings.TrimSpace(v)
	}
	return errors.Join(append(errs, c.Validate())...)
}

// Validate checks every flag.
func (c *Fleet) Validate() error {
	var errs []error
	if c.Prometheus == "" {
		errs = append(errs, problem("--prometheus", "", "want the URL of a Prometheus-compatible query API, e.g. http://prometheus:9090"))
	} else if msg := checkQueryURL(c.Prometheus); msg != "" {
		errs = append(errs, problem("--prometheus", c.Prometheus, "%s", msg))
	}
	tlsFiles := false
	for _, f := range []struct{ name, v, what string }{
		{"--ca-file", c.CAFile, "the PEM CA bundle that signed the query API's certificate"},
		{"--cert-file", c.CertFile, "the PEM client certificate"},
		{"--key-file", c.KeyFile, "the PEM client key"},
	} {
		if f.v == "" {
			continue
		}
		tlsFiles = true
		if _, err := os.Stat(f.v); err != nil {
			errs = append(errs, problem(f.name, f.v, "%s: want %s", statReason(err), f.what))
		}
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		name, v := "--cert-file", c.CertFile
		if c.CertFile == "" {
			name, v = "--key-file", c.KeyFile
		}
		errs = append(errs, problem(name, v, "a client certificate needs both --cert-file and --key-file"))
	}
	if (tlsFiles || c.Insecure) && strings.HasPrefix(c.Prometheus, "http://") {
		errs = append(errs, problem("--prometheus", c.Prometheus, "TLS flags given for an http:// URL: use https:// or drop them"))
	}
	if _, err := regexp.Compile("^(?:" + c.Job + ")$"); err != nil || c.Job == "" {
		errs = append(errs, problem("--job", c.Job, "want a regular expression matching the agents' job label (service.name), e.g. bpfleet-agent"))
	}
	if !promLabel.MatchString(c.Pool) {
		errs = append(errs, problem("--pool-label", c.Pool, "want a Prometheus label name, e.g. k8s_nodepool_name"))
	}
	if c.Since < MinFleetRange {
		errs = append(errs, problem("--since", c.Since.String(), "want at least %v", MinFleetRange))
	}
	if c.Window < MinFleetRange {
		errs = append(errs, problem("--window", c.Window.String(), "want at least %v", MinFleetRange))
	} else if c.Window > c.Since && c.Since >= MinFleetRange {
		errs = append(errs, problem("--window", c.Window.String(), "want at most --since (%v)", c.Since))
	}
	if c.Timeout <= 0 {
		errs = append(errs, problem("--timeout", c.Timeout.String(), "want a positive duration, e.g. 30s"))
	}
	if c.Output != "table" && c.Output != "json" {
		errs = append(errs, problem("--output", c.Output, "want table or json"))
	}
	if c.Limit < 0 {
		errs = append(errs, problem("--limit", strconv.Itoa(c.Limit), "want 0 (all) or a positive number of rows"))
	}
	if c.Sort != "" && !slices.Contains(FleetSorts, c.Sort) {
		errs = append(errs, problem("--sort", c.Sort, "want one of %s", strings.Join(FleetSorts, ", ")))
	}
	if c.Watch {
		if c.Interval < MinFleetInterval {
			errs = append(errs, problem("--interval", c.Interval.String(), "want at least %v", MinFleetInterval))
		}
		if c.Count < 0 {
			errs = append(errs, problem("--count", strconv.Itoa(c.Count), "want 0 (until interrupted) or a positive number of refreshes"))
		}
	} else {
		if c.IntervalSet {
			errs = append(errs, problem("--interval", c.Interval.String(), "only used with --watch: add --watch or drop it"))
		}
		if c.CountSet {
			errs = append(errs, problem("--count", strconv.Itoa(c.Count), "only used with --watch: add --watch or drop it"))
		}
	}
	return errors.Join(errs...)
}

var promLabel = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)

func checkQueryURL(v string) string {
	u, err := url.Parse(v)
	switch {
	case err != nil:
		return "not a URL: want e.g. http://prometheus:9090"
	case u.Scheme != "http" && u.Scheme != "https":
		return "want an http:// or https:// URL, e.g. http://prometheus:9090"
	case u.Hostname() == "":
		return "no host: want e.g. http://prometheus:9090"
	case u.Port() != "" && !validPort(u.Port()):
		return "bad port: want a number from 1 to 65535"
	case u.RawQuery != "" || u.Fragment != "":
		return "a query or fragment: want the API's base URL (the part before /api/v1)"
	}
	return ""
}
