package config

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func fleetWith(mod func(*Fleet)) Fleet {
	c := Fleet{Prometheus: "http://prometheus:9090", Job: "bpfleet-agent", Pool: "k8s_nodepool_name", Since: time.Hour,
		Window: 5 * time.Minute, Timeout: 30 * time.Second, Output: "table", Interval: 10 * time.Second, Limit: 20, Sort: "cpu"}
	if mod != nil {
		mod(&c)
	}
	return c
}

// TestFleetResolve: every bad `bpfleet fleet` flag is one line naming it;
// the token comes from --token-file, else the environment.
func TestFleetResolve(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	os.WriteFile(token, []byte("s3cret\n"), 0o600)
	empty := filepath.Join(dir, "empty")
	os.WriteFile(empty, nil, 0o600)
	missing := filepath.Join(dir, "missing")

	for _, tc := range []struct {
		name      string
		mod       func(*Fleet)
		env       map[string]string
		want      []string // the problems' names, in order; none: valid
		wantToken string
	}{
		{name: "defaults"},
		{name: "https with a CA and a client pair", mod: func(c *Fleet) {
			c.Prometheus, c.CAFile, c.CertFile, c.KeyFile = "https://vmauth:8427/select/0/prometheus", token, token, token
		}},
		{name: "no URL", mod: func(c *Fleet) { c.Prometheus = "" }, want: []string{"--prometheus"}},
		{name: "not http", mod: func(c *Fleet) { c.Prometheus = "ftp://x" }, want: []string{"--prometheus"}},
		{name: "no host", mod: func(c *Fleet) { c.Prometheus = "http://:9090" }, want: []string{"--prometheus"}},
		{name: "bad port", mod: func(c *Fleet) { c.Prometheus = "http://p:99999" }, want: []string{"--prometheus"}},
		{name: "a query in the URL", mod: func(c *Fleet) { c.Prometheus = "http://p:9090/api/v1/query?query=up" }, want: []string{"--prometheus"}},
		{name: "TLS flags on http", mod: func(c *Fleet) { c.Insecure = true }, want: []string{"--prometheus"}},
		{name: "CA missing", mod: func(c *Fleet) { c.Prometheus, c.CAFile = "https://p", missing }, want: []string{"--ca-file"}},
		{name: "cert without key", mod: func(c *Fleet) { c.Prometheus, c.CertFile = "https://p", token }, want: []string{"--cert-file"}},
		{name: "key without cert", mod: func(c *Fleet) { c.Prometheus, c.KeyFile = "https://p", token }, want: []string{"--key-file"}},
		{name: "bad job regex", mod: func(c *Fleet) { c.Job = "(" }, want: []string{"--job"}},
		{name: "empty job", mod: func(c *Fleet) { c.Job = "" }, want: []string{"--job"}},
		{name: "pool not a label", mod: func(c *Fleet) { c.Pool = "k8s.nodepool.name" }, want: []string{"--pool-label"}},
		{name: "since too short", mod: func(c *Fleet) { c.Since = time.Second }, want: []string{"--since"}},
		{name: "window too short", mod: func(c *Fleet) { c.Window = time.Second }, want: []string{"--window"}},
		{name: "window over since", mod: func(c *Fleet) { c.Since, c.Window = time.Minute, time.Hour }, want: []string{"--window"}},
		{name: "no timeout", mod: func(c *Fleet) { c.Timeout = 0 }, want: []string{"--timeout"}},
		{name: "yaml", mod: func(c *Fleet) { c.Output = "yaml" }, want: []string{"--output"}},
		{name: "negative limit", mod: func(c *Fleet) { c.Limit = -1 }, want: []string{"--limit"}},
		{name: "bad sort", mod: func(c *Fleet) { c.Sort = "mem" }, want: []string{"--sort"}},
		{name: "watch too fast", mod: func(c *Fleet) { c.Watch, c.Interval = true, 100*time.Millisecond }, want: []string{"--interval"}},
		{name: "watch count negative", mod: func(c *Fleet) { c.Watch, c.Count = true, -1 }, want: []string{"--count"}},
		{name: "interval without watch", mod: func(c *Fleet) { c.IntervalSet = true }, want: []string{"--interval"}},
		{name: "count without watch", mod: func(c *Fleet) { c.CountSet = true }, want: []string{"--count"}},
		{name: "token file", mod: func(c *Fleet) { c.TokenFile = token }, env: map[string]string{FleetTokenEnv: "other"}, wantToken: "s3cret"},
		{name: "token from the environment", env: map[string]string{FleetTokenEnv: " envtok\n"}, wantToken: "envtok"},
		{name: "token file missing", mod: func(c *Fleet) { c.TokenFile = missing }, want: []string{"--token-file"}},
		{name: "token file empty", mod: func(c *Fleet) { c.TokenFile = empty }, want: []string{"--token-file"}},
		{name: "every problem at once", mod: func(c *Fleet) { c.Prometheus, c.Output, c.Since = "", "yaml", 0 },
			want: []string{"--prometheus", "--since", "--output"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := fleetWith(tc.mod)
			err := c.Resolve(MapEnv(tc.env))
			var got []string
			for _, line := range strings.Split(errString(err), "\n") {
				if line == "" {
					continue
				}
				got = append(got, strings.SplitN(line, "=", 2)[0])
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("problems %q, want %q:\n%v", got, tc.want, err)
			}
			var p *Problem
			if err != nil && (!errors.As(err, &p) || !IsUsage(err)) {
				t.Errorf("not a usage Problem: %v", err)
			}
			if err == nil && c.Token != tc.wantToken {
				t.Errorf("token %q, want %q", c.Token, tc.wantToken)
			}
		})
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
