// Package netguard bounds what a client connection may cost an HTTP server:
// read, write and idle timeouts, a cap on open connections in total and per
// remote IP, and the connection closed right after a 401 or 403. Every
// lockgate HTTP server (the node API, `lockgate serve`, `lockgate store`) is
// built with NewServer and serves on a Listen listener.
//
// It imports nothing from lockgate, so that any package may use it.
package netguard

import (
	"log"
	"net/http"
	"time"
)

// Defaults of Limits. docs/operations.md ("Connection limits") explains
// each choice; the CLI flags --read-header-timeout, --read-timeout,
// --write-timeout, --idle-timeout, --max-conns and --max-conns-per-ip
// override them.
const (
	// DefaultReadHeaderTimeout bounds how long a client may take to send a
	// request's headers, from the moment the connection is accepted (or
	// was last used): a connection that sends nothing is closed after it.
	DefaultReadHeaderTimeout = 10 * time.Second
	// DefaultReadTimeout bounds reading a whole request, headers and body.
	// Request bodies are small JSON documents (the gateway caps them at 64
	// KiB), so a body still arriving after this is a slow-loris client: its
	// read fails and the handler returns instead of holding a goroutine.
	DefaultReadTimeout = 15 * time.Second
	// DefaultWriteTimeout bounds a response, from the end of its request's
	// headers to the last byte written. It must exceed the longest
	// legitimate handler: a REST acquire with wait_ms answers within the
	// gateway's sync window (2 s) and then with a 202 ticket; a renew,
	// release or inspect waits for a Raft commit up to the node's apply
	// timeout (10 s); a membership join on the leader waits for AddVoter
	// and the member record, each up to the apply timeout (20 s in all).
	// WebSocket connections are hijacked and set their own deadlines.
	DefaultWriteTimeout = 30 * time.Second
	// DefaultIdleTimeout is how long a keep-alive connection may sit
	// between requests before the server closes it.
	DefaultIdleTimeout = 60 * time.Second
	// DefaultMaxConns caps the connections one server holds open at once
	// (each costs a file descriptor); further ones are closed at accept.
	DefaultMaxConns = 10000
	// DefaultMaxConnsPerIP caps the connections from one remote IP, so
	// that a single host cannot take the whole of DefaultMaxConns. It
	// leaves room for `lockgate-bench latency` at its maximum of 1024
	// clients on one host; behind a proxy or load balancer every client
	// shares the proxy's IP: raise it or turn it off (-1) there.
	DefaultMaxConnsPerIP = 2048
)

// Limits are the connection limits of one HTTP server. A zero field takes
// its default (above); a negative one turns that limit off (for the
// timeouts, as a zero does in net/http: an IdleTimeout off falls back to
// ReadTimeout, a ReadHeaderTimeout off to ReadTimeout).
type Limits struct {
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	WriteTimeout      time.Duration
	IdleTimeout       time.Duration
	MaxConns          int
	MaxConnsPerIP     int
}

// DefaultLimits returns Limits with every default filled.
func DefaultLimits() Limits { return Limits{}.withDefaults() }

// withDefaults fills zero fields; negative fields stay negative (off).
func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, DefaultReadHeaderTimeout)
	def(&l.ReadTimeout, DefaultReadTimeout)
	def(&l.WriteTimeout, DefaultWriteTimeout)
	def(&l.IdleTimeout, DefaultIdleTimeout)
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns
	}
	if l.MaxConnsPerIP == 0 {
		l.MaxConnsPerIP = DefaultMaxConnsPerIP
	}
	// The read timeout covers the headers too: a shorter one given alone
	// must not be outlived by the header default.
	if l.ReadTimeout > 0 && l.ReadHeaderTimeout > l.ReadTimeout {
		l.ReadHeaderTimeout = l.ReadTimeout
	}
	return l
}

// off maps a negative (turned off) timeout to net/http's zero.
func off(d time.Duration) time.Duration { return max(d, 0) }

// NewServer returns an http.Server for h with the timeouts of l. Its
// handler answers every 401 and 403 with "Connection: close", so a
// refused client's connection ends with the answer instead of idling
// until a timeout. Serve it on a Listen listener for the connection caps.
// errorLog may be nil (net/http's default).
func NewServer(h http.Handler, l Limits, errorLog *log.Logger) *http.Server {
	l = l.withDefaults()
	return &http.Server{
		Handler:           CloseRefused(h),
		ReadHeaderTimeout: off(l.ReadHeaderTimeout),
		ReadTimeout:       off(l.ReadTimeout),
		WriteTimeout:      off(l.WriteTimeout),
		IdleTimeout:       off(l.IdleTimeout),
		ErrorLog:          errorLog,
	}
}
