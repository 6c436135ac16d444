// Package apiconst holds what the command-line tools need to know about
// the agent's local API without linking its server and client (package
// api, net/http and crypto/tls): internal/config checks --api-addr and the
// token with these. The CLI build (-tags lean) thereby leaves net/http
// out, whose package initialisation and size cost every one-shot `bpfleet
// list` ~0.25 ms (make bench BENCH=list). Package api re-exports them.
package apiconst

import (
	"net"
	"strings"
)

// DefaultAddr is where the API listens unless told otherwise: loopback only,
// so an agent started without thought exposes nothing to the network.
const DefaultAddr = "127.0.0.1:9808"

// TokenEnv is the environment variable a bearer token is read from when no
// token file is given.
const TokenEnv = "BPFLEET_API_TOKEN"

// MinTokenLen is the shortest bearer token accepted: anything shorter is
// guessable by a patient client on the node network.
const MinTokenLen = 16

// IsLoopback reports whether host (the host part of a listen address) only
// accepts connections from this machine. An empty host or a name other than
// "localhost" listens on, or may resolve to, other interfaces.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}
