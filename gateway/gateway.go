// Package gateway serves any lock.Locker over WebSocket (a push protocol:
// grants arrive as their commits do) and REST, with metrics, health checks and
// limits. docs/protocol.md is the reference of both protocols.
package gateway

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel/trace"

	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/internal/workerpool"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Defaults of Options.
const (
	DefaultMaxMessageBytes   = 64 << 10
	DefaultMaxWaitersPerConn = 1024
	DefaultWriteTimeout      = 10 * time.Second
	DefaultPingInterval      = 15 * time.Second
	DefaultIdleTimeout       = 45 * time.Second
	DefaultSyncWindow        = 2 * time.Second
	DefaultMaxWait           = 5 * time.Minute
	// DefaultMaxInFlightPerConn bounds the frames of one WebSocket
	// connection being served at once (try-acquire, renew, release,
	// inspect). The reader stops reading while that many are in flight:
	// back-pressure, not an error. Waiting acquires are bounded apart
	// (MaxWaitersPerConn) and take no slot, so that a connection's waits
	// cannot starve its own renews.
	DefaultMaxInFlightPerConn = 64
	// DefaultMaxLocksPerConn bounds the leases one WebSocket connection
	// holds, counting its acquires in progress; one more is refused with
	// too_many_locks.
	DefaultMaxLocksPerConn = 10000
	// DefaultMaxTicketsPerClient bounds the REST tickets (acquires waiting
	// in the gateway, and results not yet collected) of one client: its
	// bearer token when the gateway has tokens, else its IP address. One
	// more is refused with 429 too_many_tickets.
	DefaultMaxTicketsPerClient = 1024
	// DefaultMaxWatchesPerConn bounds the watches (command 9) one
	// WebSocket connection has open; one more is refused with
	// too_many_watches.
	DefaultMaxWatchesPerConn = 64
	// DefaultWatchBuffer bounds the events of one watch waiting to be
	// written to a connection that does not keep up; one more ends the
	// watch with watch_overflow.
	DefaultWatchBuffer = 1024
	// opTimeout bounds one renew, release or inspect on the backend.
	opTimeout = 10 * time.Second
)

// Options configures a Gateway. Zero fields take the defaults above.
type Options struct {
	Logger            *slog.Logger
	MaxMessageBytes   int64
	MaxWaitersPerConn int
	WriteTimeout      time.Duration
	PingInterval      time.Duration
	IdleTimeout       time.Duration
	// SyncWindow is how long a REST acquire with wait_ms waits before it
	// answers 202 with a ticket.
	SyncWindow time.Duration
	// MaxWait bounds a REST acquire's wait_ms.
	MaxWait time.Duration
	// MaxInFlightPerConn, MaxLocksPerConn and MaxTicketsPerClient are the
	// per-client limits (see their defaults).
	MaxInFlightPerConn  int
	MaxLocksPerConn     int
	MaxTicketsPerClient int
	// MaxWatchesPerConn and WatchBuffer bound the watches of a connection
	// (see their defaults).
	MaxWatchesPerConn int
	WatchBuffer       int
	// MaxSessionsPerConn bounds the sessions a WebSocket connection has
	// opened and not closed (DefaultMaxSessionsPerConn).
	MaxSessionsPerConn int
	// Ready reports whether the backend can serve (for /readyz); nil means
	// always ready.
	Ready func() error
	// Tokens, when not nil, are the bearer tokens every request must carry
	// (Authorization: Bearer <token>; for WebSocket, on the upgrade
	// request), except /healthz and /readyz. /metrics needs one too.
	Tokens *Tokens
	// AlsoIdentify, when not nil, admits a request that carries no
	// token of Tokens but another credential the server accepts, and
	// names its identity: raftgw admits a node's admin tokens and client
	// certificates verified against the cluster CA (the web console's
	// users, docs/console.md; a certificate's identity is its subject's
	// common name).
	AlsoIdentify func(*http.Request) (identity string, ok bool)
	// Policy holds the tenants' policy in force (policy.go): each
	// identity's permissions on key prefixes and its quotas. Nil, or
	// holding none: every identity may lock every key, with
	// DefaultQuotas.
	Policy *PolicyHolder
	// Audit, when not nil, receives the audit trail of what requests
	// asked for: grants, releases, session opens and closes, and the
	// policy's refusals (docs/security.md, "Audit trail").
	Audit *audit.Log
	// AllowedOrigins are the Origins whose browser pages may open a
	// WebSocket ("*": any). A request without Origin (a program, not a
	// page) and a same-origin page always may. Empty: cross-origin pages
	// may when the gateway checks tokens (the token is the credential) or
	// when the connection came to a loopback address; otherwise they are
	// refused with 403 (docs/security.md).
	AllowedOrigins []string
	// TracerProvider, when not nil, traces every acquire and release
	// (trace.go): a span per request, a child of the caller's W3C trace
	// context when it sends one. Nil: no tracing, at the cost of a nil
	// check per request.
	TracerProvider trace.TracerProvider
	// TraceKeyNames puts key names in the spans (lockgate.key); by
	// default they carry only a hash of the key (lockgate.key_hash).
	TraceKeyNames bool
}

func (o *Options) fill() {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.MaxMessageBytes <= 0 {
		o.MaxMessageBytes = DefaultMaxMessageBytes
	}
	defInt := func(n *int, v int) {
		if *n <= 0 {
			*n = v
		}
	}
	defInt(&o.MaxWaitersPerConn, DefaultMaxWaitersPerConn)
	defInt(&o.MaxInFlightPerConn, DefaultMaxInFlightPerConn)
	defInt(&o.MaxLocksPerConn, DefaultMaxLocksPerConn)
	defInt(&o.MaxTicketsPerClient, DefaultMaxTicketsPerClient)
	defInt(&o.MaxWatchesPerConn, DefaultMaxWatchesPerConn)
	defInt(&o.WatchBuffer, DefaultWatchBuffer)
	defInt(&o.MaxSessionsPerConn, DefaultMaxSessionsPerConn)
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&o.WriteTimeout, DefaultWriteTimeout)
	def(&o.PingInterval, DefaultPingInterval)
	def(&o.IdleTimeout, DefaultIdleTimeout)
	def(&o.SyncWindow, DefaultSyncWindow)
	def(&o.MaxWait, DefaultMaxWait)
}

// Gateway is an http.Handler serving the lock protocols over one Locker.
// It is safe for concurrent use; it never closes the Locker.
type Gateway struct {
	l       lock.Locker
	opts    Options
	tracer  *tracer // nil: tracing is off
	log     *slog.Logger
	mux     *http.ServeMux
	metrics *metrics
	tickets *tickets
	// sessions are the sessions served through the gateway, by id.
	sessions *sessionTable
	// workers run the backend calls (acquire, release, renew, inspect) off
	// the connection's reader, so that one slow call does not hold up the
	// next frame.
	workers *workerpool.Pool
	// wanted: the Locker tells holders when a caller waits for their key,
	// and connections push it (wanted.go). upgradeHeader announces it.
	wanted bool
	// announced: what the Locker offers beyond the core (featuresOf),
	// with the Lockgate-Features header that says it; read again on each
	// request, because a Locker's features may change while it runs
	// (raftlock's open as its cluster's format gate rises). backend names
	// it in unsupported errors.
	announced atomic.Pointer[announcement]
	backend   string
	upgrader  *websocket.Upgrader
	// slotWait, if not nil, is called when a connection's reader starts
	// waiting for an in-flight slot (tests await it).
	slotWait func()
	// watchOverflowed, if not nil, is called when a watch ends with
	// watch_overflow (tests await it).
	watchOverflowed func()
	// tenants is the per-identity state; tl the Locker every request
	// calls, which enforces the policy (tenants_locker.go).
	tenants *tenancy
	tl      *tenantLocker

	mu     sync.Mutex
	conns  map[*conn]struct{}
	closed bool
}

// New returns a gateway over l.
func New(l lock.Locker, opts Options) *Gateway {
	opts.fill()
	g := &Gateway{l: l, opts: opts, log: opts.Logger, mux: http.NewServeMux(), conns: map[*conn]struct{}{}}
	g.tenants = newTenancy(g)
	g.tl = &tenantLocker{l: l, t: g.tenants}
	g.metrics = newMetrics(g)
	g.metrics.reg.MustRegister(usageCollector{g.tenants})
	g.tickets = newTickets(opts.MaxTicketsPerClient)
	g.sessions = newSessionTable()
	g.workers = workerpool.New()
	g.wanted = lock.SignalsWanted(l)
	g.backend = fmt.Sprintf("the gateway's backend (%T)", l)
	g.upgrader = g.newUpgrader()
	g.tracer = newTracer(opts)
	g.mux.HandleFunc("/v1/ws", g.serveWS)
	g.mux.HandleFunc("/locks/{key}", g.serveLock)
	g.mux.HandleFunc("/locks", g.restAcquireAll)
	g.mux.HandleFunc("/tickets/{ticket}", g.serveTicket)
	g.mux.HandleFunc("/sessions", g.postOnly(g.restOpenSession))
	g.mux.HandleFunc("/sessions/renew", g.postOnly(g.restRenewSession))
	g.mux.HandleFunc("/sessions/close", g.postOnly(g.restCloseSession))
	g.mux.Handle("GET /metrics", promhttp.HandlerFor(g.metrics.reg, promhttp.HandlerOpts{}))
	g.mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("ok\n"))
	})
	g.mux.HandleFunc("GET /readyz", g.serveReady)
	g.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		g.writeError(w, r, newError(wire.CodeNotFound, "no such endpoint: "+r.URL.Path+" (see docs/protocol.md)"))
	})
	return g
}

// ServeHTTP implements http.Handler. With Options.Tokens, a request
// without a valid bearer token (other than a health check) is answered 401
// with the same body whatever was wrong, and the token is never logged.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if a := g.announce(); a.value != "" {
		// What the backend offers, on every answer (the upgrade's own
		// response gets it from upgradeHeader: the upgrader writes its own).
		w.Header().Set(wire.FeaturesHeader, a.value)
	}
	if openPath(r.URL.Path) {
		g.mux.ServeHTTP(w, r)
		return
	}
	if g.refuseCrossSite(w, r) {
		return
	}
	id, ok := g.identify(r)
	if !ok {
		g.metrics.errors.WithLabelValues(wire.CodeUnauthorized).Inc()
		g.log.Debug("unauthorized request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
		writeUnauthorized(w)
		return
	}
	g.mux.ServeHTTP(w, r.WithContext(withCaller(r.Context(), Caller{Identity: id, Remote: r.RemoteAddr})))
}

// Registry is the gateway's Prometheus registry (served at /metrics).
func (g *Gateway) Registry() *prometheus.Registry { return g.metrics.reg }

func (g *Gateway) serveReady(w http.ResponseWriter, r *http.Request) {
	if g.opts.Ready != nil {
		if err := g.opts.Ready(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	w.Write([]byte("ready\n"))
}

// Close ends every WebSocket connection (close code 1001, going away) and
// cancels their waits and the REST tickets' waits; leases stay held until
// their TTL unless a client asked for release on disconnect.
func (g *Gateway) Close() error {
	g.mu.Lock()
	g.closed = true
	cs := make([]*conn, 0, len(g.conns))
	for c := range g.conns {
		cs = append(cs, c)
	}
	g.mu.Unlock()
	for _, c := range cs {
		c.goAway()
	}
	g.tickets.cancelAll()
	g.workers.Close()
	return nil
}

func (g *Gateway) track(c *conn) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closed {
		return false
	}
	g.conns[c] = struct{}{}
	return true
}

func (g *Gateway) untrack(c *conn) {
	g.mu.Lock()
	delete(g.conns, c)
	g.mu.Unlock()
}

func durationMS(d time.Duration) int64 { return int64(d / time.Millisecond) }

// ttlOption turns a wire TTL (ms; 0 = default) into the TTL to ask for. The
// gateway never asks the backend to auto-renew: renewal is the client's job,
// so a crashed client's leases run out.
func ttlOption(ms int64) time.Duration {
	if ms == 0 {
		return lock.DefaultTTL
	}
	if ms < 0 {
		return time.Duration(ms) // rejected by validation with invalid_ttl
	}
	if ms > int64(lock.MaxTTL/time.Millisecond) {
		return lock.MaxTTL + time.Millisecond // likewise
	}
	return time.Duration(ms) * time.Millisecond
}

// rebuild makes a Lease for (key, token, handle) as a client presented it;
// backends identify grants by those fields, not by the object.
func rebuild(key, handle string, token uint64, ttl time.Duration) *lock.Lease {
	return kit.NewLease(kit.Grant{Key: key, Token: lock.Token(token), Handle: handle, TTL: ttl, Sent: time.Now()})
}
