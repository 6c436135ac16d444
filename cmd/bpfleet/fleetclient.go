//go:build !lean

package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/api"
	promv1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/bpfleet/bpfleet/internal/config"
	"github.com/bpfleet/bpfleet/internal/fleetquery"
)

// promClient asks the query API through client_golang's v1 API (the CLI
// build runs bpfleet-agent for `fleet` instead: fleetclient_lean.go).
type promClient struct {
	api promv1.API
	// inc is the store's answer to fleetquery.MetricsQLProbe, asked until
	// it answers, then kept (under --watch too: a store does not change
	// language).
	mu  sync.Mutex
	inc string
}

// newFleetClient is a client of c's query API with its token and TLS.
func newFleetClient(c *config.Fleet) (querier, error) {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if strings.HasPrefix(c.Prometheus, "https://") {
		tc, err := config.TLSFiles{Certificate: c.CAFile, ClientCertificate: c.CertFile, ClientKey: c.KeyFile}.Load()
		if err != nil {
			return nil, fmt.Errorf("--ca-file, --cert-file, --key-file: %w", err)
		}
		if tc == nil {
			tc = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		tc.InsecureSkipVerify = c.Insecure
		tr.TLSClientConfig = tc
	}
	var rt http.RoundTripper = tr
	if c.Token != "" {
		rt = bearer{token: c.Token, next: tr}
	}
	cl, err := api.NewClient(api.Config{Address: c.Prometheus, RoundTripper: rt})
	if err != nil {
		return nil, fmt.Errorf("--prometheus: %w", err)
	}
	return &promClient{api: promv1.NewAPI(cl)}, nil
}

// bearer adds the token to every request.
type bearer struct {
	token string
	next  http.RoundTripper
}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.token)
	return b.next.RoundTrip(r)
}

func (p *promClient) query(ctx context.Context, q string, at time.Time) ([]sample, error) {
	v, _, err := p.api.Query(ctx, q, at)
	if err != nil {
		return nil, queryError(err)
	}
	vec, ok := v.(model.Vector)
	if !ok {
		return nil, fmt.Errorf("want an instant vector, the API answered a %s", v.Type())
	}
	out := make([]sample, len(vec))
	for i, s := range vec {
		l := make(map[string]string, len(s.Metric))
		for k, v := range s.Metric {
			l[string(k)] = string(v)
		}
		out[i] = sample{labels: l, value: float64(s.Value)}
	}
	return out, nil
}

// missIncrease asks the store, once, whether it speaks MetricsQL: a store
// that answers fleetquery.MetricsQLProbe has increase_pure(), which counts
// a cause's first misses on a node that its increase() may leave out; one
// that refuses the query as bad_data (PromQL: an unknown function) gets
// increase(). Any other failure (unreachable, timeout) is the run's error.
func (p *promClient) missIncrease(ctx context.Context) (string, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inc != "" {
		return p.inc, nil
	}
	_, _, err := p.api.Query(ctx, fleetquery.MetricsQLProbe, time.Now())
	var pe *promv1.Error
	switch {
	case err == nil:
		p.inc = fleetquery.IncreasePure
	case errors.As(err, &pe) && pe.Type == promv1.ErrBadData:
		p.inc = fleetquery.IncreasePromQL
	default:
		return "", fmt.Errorf("asking which query language the store speaks: %w", queryError(err))
	}
	return p.inc, nil
}

// queryError tells a store that cannot be reached from one that refused
// the query, on one line.
func queryError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) && !ue.Timeout() && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled) {
		return unreachableError{ue.Err}
	}
	var pe *promv1.Error
	if errors.As(err, &pe) {
		msg := pe.Msg
		if d := strings.Join(strings.Fields(pe.Detail), " "); d != "" && len(d) < 200 {
			msg += ": " + d
		}
		return fmt.Errorf("%s: %s", pe.Type, msg)
	}
	return err
}
