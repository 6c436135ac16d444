package config

import (
	"errors"
	"net"
	"strconv"
	"time"

	"github.com/bpfleet/bpfleet/internal/apiconst"
)

// ReadyExportFailures is how many metric exports in a row must fail before
// the agent says it is not ready. One failure is a collector restarting
// or a dropped connection, and the next export usually carries the data;
// three (30 s at the default interval) is a backend that is down or an
// endpoint or header that is wrong, which an operator should see in
// `kubectl get ds` and which should hold a rolling update (a new release
// with a broken OTLP setting stops at its first pods). A not-ready agent
// is never restarted for it: it keeps scanning, serving its API and
// retrying, and is ready again at the first export that succeeds.
const ReadyExportFailures = 3

// MinLivenessBound is the least time the scan loop may go without a pass
// before the agent says it is not live: a scan of thousands of programs
// on a loaded node, or the start (pod cache sync, first scan), can take
// seconds, and a restart loses the open miss episodes.
const MinLivenessBound = 30 * time.Second

// LivenessBound is how old the scan loop's last pass may be before
// /healthz fails: three --interval, at least MinLivenessBound.
func LivenessBound(interval time.Duration) time.Duration {
	return max(3*interval, MinLivenessBound)
}

// MaxHealthTimeout bounds `bpfleet health --timeout`: the kubelet's probe
// has its own timeoutSeconds, and an answer slower than this is no answer.
const MaxHealthTimeout = time.Minute

// Health is `bpfleet health`'s configuration.
type Health struct {
	// APIAddr is the agent's --api-addr. An unspecified host (0.0.0.0,
	// ::, empty) is asked on the loopback, where the agent also listens.
	APIAddr string
	Ready   bool          // --ready: readiness instead of liveness
	Timeout time.Duration // --timeout: the whole request
}

// DefaultHealth is the flags' defaults.
func DefaultHealth() Health {
	return Health{APIAddr: apiconst.DefaultAddr, Timeout: 3 * time.Second}
}

// Validate checks the address and the timeout, one line each.
func (h *Health) Validate() error {
	var errs []error
	host, port, err := net.SplitHostPort(h.APIAddr)
	switch {
	case err != nil:
		errs = append(errs, problem("--api-addr", h.APIAddr, "not host:port: want the agent's --api-addr, e.g. 127.0.0.1:9808"))
	case host != "" && net.ParseIP(host) == nil && host != "localhost":
		errs = append(errs, problem("--api-addr", h.APIAddr, "host %s: want an IP address or localhost", quote(host)))
	default:
		if p, err := strconv.ParseUint(port, 10, 16); err != nil || p == 0 {
			errs = append(errs, problem("--api-addr", h.APIAddr, "port %s: want a number from 1 to 65535", quote(port)))
		}
	}
	if h.Timeout <= 0 || h.Timeout > MaxHealthTimeout {
		errs = append(errs, problem("--timeout", h.Timeout.String(), "want a duration above 0 and at most %v", MaxHealthTimeout))
	}
	return errors.Join(errs...)
}

// DialAddr is where the health check connects: the agent's address, with
// an unspecified host (listening on every address) asked on the loopback.
func (h *Health) DialAddr() string {
	host, port, err := net.SplitHostPort(h.APIAddr)
	if err != nil {
		return h.APIAddr
	}
	if ip := net.ParseIP(host); host == "" || (ip != nil && ip.IsUnspecified()) {
		if ip != nil && ip.To4() == nil {
			host = "::1"
		} else {
			host = "127.0.0.1"
		}
	}
	return net.JoinHostPort(host, port)
}
