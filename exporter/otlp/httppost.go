package otlp

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// poster sends OTLP/HTTP requests itself, one at a time over one kept
// HTTP/1.1 connection, and reads each answer when the next request goes out
// (or at a flush) instead of waiting for it.
//
// Why not net/http: its client hands every request through three
// goroutines (the caller, the connection's writer and reader) and wakes up
// again when the answer arrives, a few ms after the request, so every
// export was two bursts of work, each waking the runtime's sysmon into a
// millisecond of 20 µs polls. Measured with the agent's own 14 KB request
// against a loopback server answering after 5 ms, one send per second,
// twins side by side for 60 s (CPU from schedstat): net/http 490-670 µs
// per request, one goroutine waiting for the answer 280-290 µs, the answer
// read at the next send 165-175 µs. By then it has been in the socket for
// an interval: reading it costs one read(2).
//
// What this changes: an error status (or a partial success) is seen one
// export later, and counted then. A connection the backend closed while
// idle is noticed before the next request (a non-blocking peek) and opened
// again; a request whose write fails on a kept connection goes once more
// on a fresh one (the backend saw none of it).
type poster struct {
	addr    string // host:port to dial
	tls     *tls.Config
	timeout time.Duration
	url     string // for error messages
	head    []byte // request line and headers up to Content-Length's value
	req     []byte // head with this request's length

	conn net.Conn
	raw  syscall.RawConn // the TCP connection under conn, for the peek
	br   *bufio.Reader
	// pending: a request was sent and its answer not read yet; due is
	// when that answer has to have come.
	pending bool
	due     time.Time
}

func newPoster(u *url.URL, tlsConf *tls.Config, headers http.Header, timeout time.Duration) *poster {
	host := u.Host
	port := u.Port()
	if port == "" {
		port = "80"
		if u.Scheme == "https" {
			port = "443"
		}
		host = net.JoinHostPort(u.Hostname(), port)
	}
	p := &poster{addr: host, url: u.String(), timeout: timeout}
	if u.Scheme == "https" {
		p.tls = &tls.Config{}
		if tlsConf != nil {
			p.tls = tlsConf.Clone()
		}
		if p.tls.ServerName == "" {
			p.tls.ServerName = u.Hostname()
		}
		// The requests are HTTP/1.1: no HTTP/2 from ALPN.
		p.tls.NextProtos = []string{"http/1.1"}
	}
	var b strings.Builder
	b.WriteString("POST " + u.RequestURI() + " HTTP/1.1\r\nHost: " + u.Host + "\r\n")
	for k, vs := range headers {
		for _, v := range vs {
			b.WriteString(k + ": " + v + "\r\n")
		}
	}
	b.WriteString("Content-Length: ")
	p.head = []byte(b.String())
	return p
}

// usePoster says whether the requests to u go through a poster: not when
// proxy (the resolved proxy variables' function; nil: none) names a proxy
// for u, as the requests then go through net/http's client, nor for a
// scheme other than http and https.
func usePoster(u *url.URL, proxy func(*url.URL) (*url.URL, error)) bool {
	if u.Scheme != "http" && u.Scheme != "https" {
		return false
	}
	if proxy == nil {
		return true
	}
	p, err := proxy(u)
	return err == nil && p == nil
}

// send reads the previous request's answer (its error, if it failed, is
// returned with send's own) and writes a request with body.
func (p *poster) send(ctx context.Context, body []byte, answered func(*http.Response, []byte)) error {
	prev := p.settle(answered)
	if p.conn != nil && !p.alive() {
		p.close()
	}
	reused := p.conn != nil
	err := p.write(ctx, body)
	if err != nil && reused && ctx.Err() == nil {
		// The backend closed the kept connection under us: it saw none
		// of the request (or, at worst, a part it discards).
		p.close()
		err = p.write(ctx, body)
	}
	if err != nil {
		p.close()
		err = fmt.Errorf("exporting metrics to %s: %w", p.url, err)
	}
	return errors.Join(prev, err)
}

func (p *poster) write(ctx context.Context, body []byte) error {
	deadline := p.deadline(ctx)
	if p.conn == nil {
		if err := p.dial(ctx, deadline); err != nil {
			return err
		}
	}
	p.conn.SetWriteDeadline(deadline)
	p.req = strconv.AppendInt(append(p.req[:0], p.head...), int64(len(body)), 10)
	p.req = append(p.req, "\r\n\r\n"...)
	bufs := net.Buffers{p.req, body}
	if _, err := bufs.WriteTo(p.conn); err != nil {
		return err
	}
	p.pending, p.due = true, deadline
	return nil
}

// deadline is when a request sent now has to be answered: the timeout
// from now or ctx's deadline, whichever comes first; zero (none) when the
// timeout is 0 (OTEL_EXPORTER_OTLP_TIMEOUT=0, as net/http reads it) and ctx
// has no deadline.
func (p *poster) deadline(ctx context.Context) time.Time {
	var deadline time.Time
	if p.timeout > 0 {
		deadline = time.Now().Add(p.timeout)
	}
	if d, ok := ctx.Deadline(); ok && (deadline.IsZero() || d.Before(deadline)) {
		deadline = d
	}
	return deadline
}

func (p *poster) dial(ctx context.Context, deadline time.Time) error {
	if !deadline.IsZero() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithDeadline(ctx, deadline)
		defer cancel()
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", p.addr)
	if err != nil {
		return err
	}
	tc, ok := c.(*net.TCPConn)
	if !ok {
		c.Close()
		return fmt.Errorf("dialing %s: not a TCP connection", p.addr)
	}
	raw, err := tc.SyscallConn()
	if err != nil {
		c.Close()
		return err
	}
	if p.tls != nil {
		t := tls.Client(c, p.tls)
		if err := t.HandshakeContext(ctx); err != nil {
			c.Close()
			return err
		}
		c = t
	}
	p.conn, p.raw = c, raw
	if p.br == nil {
		p.br = bufio.NewReaderSize(c, 4<<10)
	} else {
		p.br.Reset(c)
	}
	return nil
}

// settle reads the pending answer, if any, waiting for it until its due
// time (and at least a few ms: a deadline already past would fail the read
// before it looks at what arrived), or for as long as it takes without one. answered sees a 2xx answer and its body.
func (p *poster) settle(answered func(*http.Response, []byte)) error {
	if !p.pending {
		return nil
	}
	p.pending = false
	if p.due.IsZero() {
		p.conn.SetReadDeadline(time.Time{}) // no timeout
	} else {
		p.conn.SetReadDeadline(later(p.due, time.Now().Add(5*time.Millisecond)))
	}
	resp, err := http.ReadResponse(p.br, nil)
	if err != nil {
		p.close()
		return fmt.Errorf("exporting metrics to %s: reading the answer: %w", p.url, err)
	}
	// A bounded part of the answer: past it the rest is left unread, and
	// the connection cannot be reused.
	const most = 64 << 10
	msg, err := io.ReadAll(io.LimitReader(resp.Body, most+1))
	resp.Body.Close()
	if err != nil || len(msg) > most || resp.Close {
		msg = msg[:min(len(msg), most)]
		p.close()
	}
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("exporting metrics to %s: %s: %s", p.url, resp.Status, trimMsg(msg))
	}
	if answered != nil {
		answered(resp, msg)
	}
	return nil
}

// alive peeks at the idle connection without waiting: nothing to read
// means it is still open; an end of file (the backend closed it, an idle
// timeout) or unasked-for bytes mean it is not.
func (p *poster) alive() bool {
	if p.br.Buffered() > 0 {
		return false
	}
	var buf [1]byte
	open := false
	err := p.raw.Read(func(fd uintptr) bool {
		n, _, err := syscall.Recvfrom(int(fd), buf[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		open = n < 0 && (err == syscall.EAGAIN || err == syscall.EWOULDBLOCK)
		return true // never wait
	})
	return err == nil && open
}

func (p *poster) close() {
	if p.conn != nil {
		p.conn.Close()
	}
	p.conn, p.raw, p.pending = nil, nil, false
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// trimMsg is the start of an error answer's body, valid UTF-8, for the
// error line.
func trimMsg(msg []byte) string {
	return strings.TrimSpace(strings.ToValidUTF8(string(msg[:min(len(msg), 512)]), ""))
}
