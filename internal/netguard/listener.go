package netguard

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// refusalLogInterval bounds how often a Listener logs refused
// connections: at most one line per interval, with the count since the
// last one, so that a flood of refusals cannot flood the log too.
const refusalLogInterval = 10 * time.Second

// Listener is a net.Listener that enforces Limits.MaxConns and
// Limits.MaxConnsPerIP (see Listen). It is safe for concurrent use.
type Listener struct {
	net.Listener
	max, maxPerIP int
	log           *slog.Logger

	mu      sync.Mutex
	open    int
	perIP   map[string]int // only IPs with open connections
	lastLog time.Time
	logged  uint64 // refused count at the last log line

	refused atomic.Uint64
}

// Listen wraps inner so that at most l.MaxConns connections are open at
// once, and at most l.MaxConnsPerIP from one remote IP (defaults for zero
// fields, no cap for negative ones). A connection over a cap is closed as
// soon as it is accepted — Accept goes on to the next one and never
// returns it — and counted (Stats) and logged at most once per 10 s. A
// connection counts until its Close. Wrap the plain TCP listener, before
// any TLS, so that a refused connection costs no handshake. logger nil
// means slog.Default().
func Listen(inner net.Listener, l Limits, logger *slog.Logger) *Listener {
	l = l.withDefaults()
	if logger == nil {
		logger = slog.Default()
	}
	return &Listener{Listener: inner, max: l.MaxConns, maxPerIP: l.MaxConnsPerIP, log: logger, perIP: map[string]int{}}
}

// Accept returns the next connection within the caps.
func (ln *Listener) Accept() (net.Conn, error) {
	for {
		c, err := ln.Listener.Accept()
		if err != nil {
			return nil, err
		}
		ip := remoteIP(c)
		ln.mu.Lock()
		over := ""
		switch {
		case ln.max > 0 && ln.open >= ln.max:
			over = "total"
		case ln.maxPerIP > 0 && ln.perIP[ip] >= ln.maxPerIP:
			over = "per-ip"
		default:
			ln.open++
			ln.perIP[ip]++
		}
		ln.mu.Unlock()
		if over == "" {
			return &conn{Conn: c, ln: ln, ip: ip}, nil
		}
		ln.refuse(c, ip, over)
	}
}

// refuse closes c at once, counted first (as Close gives a place back
// first): a client that sees the close sees it counted. A reset (linger
// 0) rather than a FIN leaves no TIME_WAIT socket behind on this side.
func (ln *Listener) refuse(c net.Conn, ip, over string) {
	n := ln.refused.Add(1)
	if tc, ok := c.(*net.TCPConn); ok {
		tc.SetLinger(0)
	}
	c.Close()
	now := time.Now()
	ln.mu.Lock()
	due := now.Sub(ln.lastLog) >= refusalLogInterval
	var since uint64
	if due {
		since, ln.logged, ln.lastLog = n-ln.logged, n, now
	}
	open := ln.open
	ln.mu.Unlock()
	if due {
		ln.log.Warn("connections refused: over the connection cap",
			"cap", over, "last_remote_ip", ip, "refused_since_last_report", since, "refused_total", n,
			"open", open, "max_conns", ln.max, "max_conns_per_ip", ln.maxPerIP)
	}
}

func (ln *Listener) release(ip string) {
	ln.mu.Lock()
	ln.open--
	if ln.perIP[ip]--; ln.perIP[ip] <= 0 {
		delete(ln.perIP, ip)
	}
	ln.mu.Unlock()
}

// Stats is a Listener's bookkeeping at one moment.
type Stats struct {
	Open    int    // connections accepted and not yet closed
	IPs     int    // remote IPs with open connections
	Refused uint64 // connections closed at accept for a cap, since Listen
}

// Stats returns the current counts.
func (ln *Listener) Stats() Stats {
	ln.mu.Lock()
	defer ln.mu.Unlock()
	return Stats{Open: ln.open, IPs: len(ln.perIP), Refused: ln.refused.Load()}
}

// remoteIP is the IP a connection comes from; the whole address when it
// has no IP (a Unix socket: one bucket per peer address).
func remoteIP(c net.Conn) string {
	switch a := c.RemoteAddr().(type) {
	case *net.TCPAddr:
		return a.IP.String()
	case nil:
		return ""
	default:
		return a.String()
	}
}

// conn gives its place back on its first Close.
type conn struct {
	net.Conn
	ln   *Listener
	ip   string
	once sync.Once
}

// Close gives the place back before it closes the socket, so that a client
// that sees the close and connects again finds the place free.
func (c *conn) Close() error {
	c.once.Do(func() { c.ln.release(c.ip) })
	return c.Conn.Close()
}

// CloseWrite keeps net/http's graceful close (a FIN, then a pause before
// the full close, so the client reads the last answer rather than a
// reset) working through the wrapper.
func (c *conn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
