// Package client is the Go SDK of the lockgate gateway: a lock.Locker that
// speaks the WebSocket protocol of docs/protocol.md to one or more gateways
// (`lockgate serve`, or the API port of every `lockgate node`).
//
//	c, err := client.New([]string{"10.0.0.1:50051", "10.0.0.2:50052", "10.0.0.3:50053"}, client.Options{})
//	lease, err := c.Acquire(ctx, "orders/42", lock.AcquireOptions{}) // 20 s TTL, renewed automatically
//	defer c.Release(ctx, lease)
//	// act until lease.Done() closes; send lease.Token with every write
//
// # Connection
//
// A Client keeps one WebSocket connection and multiplexes every request on
// it by id; a reader goroutine hands replies and pushed grants to the
// waiting calls. It connects in the background as soon as New returns, to
// an endpoint picked at random. A gateway that answers not_leader with the
// leader's address is left for that address (at most Options.MaxHops hops
// per request before the request backs off); a connection that fails, or a
// gateway that answers closed (or, three times in a row, unavailable or
// not_leader naming no leader: an election, or a leader cut off from its
// quorum), is replaced with backoff and jitter, preferring another endpoint.
//
// # Transparent recovery
//
// Every acquire carries a client-chosen lock token (AcquireOptions.Handle,
// or a fresh lock.NewHandle()). When the connection drops or the leader
// changes, a waiting Acquire is re-sent with the same token on the new
// connection, so that on raftlock a re-sent acquire whose first copy was
// already granted returns that grant instead of queueing behind it; the
// caller only sees its grant arrive later. TryAcquire, Renew, Release and
// Inspect are re-sent likewise until their context ends (RequestTimeout
// bounds them when the context has no deadline).
//
// Renew is idempotent, so re-sending it is harmless. Release is not quite:
// a re-sent release can be answered not_held because an earlier copy
// already freed the lease. When an earlier copy may have taken effect (it
// was written and then its connection failed before the answer, or it was
// answered unavailable), the client decides by the lease's deadline: if the
// lease was still alive by the holder's own clock (Lease.Err nil and
// Deadline not passed) when the answered copy went out, nothing but the
// earlier copy can have freed it (barring an operator's forced release or a
// release through a rebuilt copy of the lease), so Release reports success
// and the lease ends with lock.ErrReleased. Otherwise the outcome is
// unknown — the earlier copy may have freed the lease (the server keeps a
// lease past its holder's deadline), or the lease expired before it
// arrived — and Release returns an error matching lock.ErrUnavailable that
// says so, never lock.ErrNotHeld, which would claim that nothing changed;
// the lease ends either way. When no earlier copy can have taken effect
// (there was none, or each was answered not_leader or closed), not_held is
// always lock.ErrNotHeld.
//
// # Deadlines
//
// A lease's Sent is the send time of the first copy of its acquire (the
// TTL started on the server after that, whichever copy it granted). When a
// grant arrives with less than half its TTL left of sent + ttl (a long wait),
// the client renews it at once and uses the renewal's send time, so Acquire
// never hands out a lease that is about to end.
//
// # Sessions
//
// When the gateway offers "sessions" (raftlock's do), the leases the
// client would renew one by one — acquired with the zero
// AcquireOptions.TTL — go into one session of the client's instead,
// opened at the first such acquire and kept alive at SessionTTL/3 by one
// keep-alive (one Raft entry per interval, whatever the number of leases).
// The session is the cluster's: its keep-alive is re-sent across
// reconnects and to a new leader like any request. When the server
// refuses it, the session ends and so does every lease in it (Done
// closes, Err matches lock.ErrSessionExpired and lock.ErrNotHeld); the
// next acquire opens a new one. A gateway that refuses to open the
// session (quota_exceeded, too_many_sessions) never fails an acquire: the
// lease renews itself instead, the client's logger warns once, and
// SessionStats counts it; the session is tried again after
// Options.SessionRetry. Options.NoSession turns sessions off; leases
// with an explicit TTL keep their own renewals. The Client is also a
// lock.SessionLocker for callers that manage their own sessions.
//
// # Rate limits
//
// A gateway that enforces per-identity rates answers requests sent too
// fast rate_limited, with the time to wait. TryAcquire and TryAcquireAll
// then return a *RateLimitedError (matching lock.ErrRateLimited) that
// carries it; Acquire and AcquireAll wait it out and try again, within
// their context. Keep-alives and renewals are never rate-limited.
//
// # Limits
//
// On backends that ignore client-chosen lock tokens (the in-memory
// reference locker), a grant made for a copy of an acquire whose connection
// dropped before the grant was delivered stays held until its TTL: the
// re-sent Acquire queues behind it (and gets it after that TTL), a re-sent
// TryAcquire answers held. On raftlock the re-sent copy recovers the grant.
// Likewise a grant that races with the cancel of an Acquire whose
// connection drops while the cancel is in flight stays held until its TTL.
// Values are sent as JSON strings: bytes that are not valid UTF-8 are
// replaced by U+FFFD.
package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/lockgate/lockgate/lock"
)

// Defaults of Options.
const (
	DefaultDialTimeout    = 5 * time.Second
	DefaultRequestTimeout = 10 * time.Second
	DefaultMaxHops        = 5
)

// DefaultBackoff is the reconnect backoff: 50 ms doubling to 2 s, with full
// jitter, no attempt limit.
func DefaultBackoff() lock.ExponentialBackoff {
	return lock.ExponentialBackoff{Base: 50 * time.Millisecond, Max: 2 * time.Second, Jitter: 1}
}

// Options configures a Client. Zero fields take the defaults.
type Options struct {
	// ClientID is the owner recorded with locks acquired without an
	// explicit AcquireOptions.Owner. Default "sdk-" + 12 random hex digits.
	ClientID string
	// DialTimeout bounds one connection attempt (TCP + WebSocket
	// handshake). Default 5 s.
	DialTimeout time.Duration
	// RequestTimeout bounds TryAcquire, Renew, Release and Inspect
	// (including their re-sends) when their context has no deadline; a
	// waiting Acquire is bounded only by its context. Default 10 s.
	RequestTimeout time.Duration
	// MaxHops is how many not_leader redirects one request follows before
	// it backs off (Acquire) or fails with a *lock.NotLeaderError (the
	// others, once their deadline passes). Default 5.
	MaxHops int
	// Backoff paces reconnects and retries of requests the gateway could
	// not serve (unavailable, leader unknown). Default DefaultBackoff().
	// The client never stops reconnecting while it is open: once the
	// strategy gives up, DefaultBackoff's pauses are used.
	Backoff lock.RetryStrategy
	// NetDial, when not nil, opens the client's TCP connections (a SOCKS
	// dialer, a connection pool with its own limits, a test's network
	// switch). Default: net.Dialer's DialContext.
	NetDial func(ctx context.Context, network, addr string) (net.Conn, error)
	// Logger receives connection events. Default: discard.
	Logger *slog.Logger
	// TLSConfig, when not nil, makes the client speak TLS (wss://) to
	// endpoints given as host:port and to the leaders it is redirected to;
	// set RootCAs to trust a private CA. Endpoints given as wss:// or
	// https:// URLs use TLS even without it (with the system's roots).
	TLSConfig *tls.Config
	// CacheLeases turns on the lease cache (docs/lease-cache.md): Release
	// keeps the lease, unused and still renewed, and the next Acquire or
	// TryAcquire of its key by this client with the same options returns
	// it (same Lease, same fencing token) without a round trip. The
	// gateway's "wanted" push — another caller waits for the key —
	// releases an unused lease for real at once; a lease in use sees
	// Lease.Wanted and its holder decides. A cached lease whose renewal
	// fails is dropped, never handed out. With the cache on, Release of a
	// kept lease does not close its Done (it lives on in the cache) and a
	// second Release of it answers lock.ErrNotHeld. Only gateways that
	// announce "wanted" pushes get leases kept (raftlock's do); elsewhere
	// Release releases. Off by default.
	CacheLeases bool
	// CacheIdle is how long an unused lease stays cached before it is
	// released for real. Default DefaultCacheIdle (10 s).
	CacheIdle time.Duration
	// MaxCachedLeases bounds the unused leases the cache keeps; past it
	// Release releases. Default DefaultMaxCachedLeases (1024).
	MaxCachedLeases int
	// NoSession turns off the client's own session: auto-renewed leases
	// (zero AcquireOptions.TTL) are then renewed one by one, as they are on
	// gateways without sessions. By default, when the gateway offers
	// "sessions", they go into one session of the client's, kept alive by
	// one keep-alive at SessionTTL/3 (session.go). With CacheLeases on, the
	// client has no session of its own either.
	NoSession bool
	// SessionTTL is the TTL of the client's own session (and so of the
	// leases in it, and of the auto-renewed leases that renew themselves
	// because the session was refused or turned out unsupported). Default
	// lock.DefaultSessionTTL (20 s).
	SessionTTL time.Duration
	// SessionRetry is how long after the gateway refused to open the
	// client's own session (quota_exceeded, too_many_sessions) its
	// auto-renewed leases renew themselves one by one before an acquire
	// tries to open the session again (session.go). Default
	// DefaultSessionRetry (30 s).
	SessionRetry time.Duration
	// Token, when not empty, is sent as "Authorization: Bearer <token>" on
	// every connection (the gateway's --auth-tokens-file). A gateway that
	// refuses it makes calls fail with an error matching ErrUnauthorized.
	Token string
	// Propagator writes a call's trace context into its request
	// (traceparent, docs/protocol.md). Nil: W3C Trace Context; pass
	// otel.GetTextMapPropagator() for the application's own.
	Propagator propagation.TextMapPropagator
}

func (o *Options) fill() {
	if o.ClientID == "" {
		o.ClientID = "sdk-" + lock.NewHandle()[:12]
	}
	if o.DialTimeout <= 0 {
		o.DialTimeout = DefaultDialTimeout
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.MaxHops <= 0 {
		o.MaxHops = DefaultMaxHops
	}
	if o.Backoff == nil {
		o.Backoff = DefaultBackoff()
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheIdle <= 0 {
		o.CacheIdle = DefaultCacheIdle
	}
	if o.MaxCachedLeases <= 0 {
		o.MaxCachedLeases = DefaultMaxCachedLeases
	}
	if o.SessionRetry <= 0 {
		o.SessionRetry = DefaultSessionRetry
	}
}

// Client is a lock.Locker over the gateway's WebSocket protocol. It is safe
// for concurrent use.
type Client struct {
	endpoints []string
	opts      Options
	log       *slog.Logger
	secure    bool // dial wss://: TLSConfig set, or the endpoints are wss/https

	ctx     context.Context // ends at Close: waits give up, keep-alives stop
	cancel  context.CancelFunc
	stop    chan struct{} // closed by Close once in-flight calls are done
	runDone chan struct{}

	nextID atomic.Uint64

	// held are the live leases by lock token, for "wanted" pushes
	// (wanted.go); signalsWanted is what the last gateway announced.
	hmu           sync.Mutex
	held          map[string]*lock.Lease
	early         map[string]bool // lock tokens of acquires in flight: true once a "wanted" push came for one
	signalsWanted atomic.Bool
	// features: what the last gateway announced; connected closes at the
	// first connection (Features waits for it).
	features  atomic.Uint32
	connected chan struct{}
	// watchOverflowed, if not nil, is called when a watch's buffer
	// overflows (tests await it).
	watchOverflowed func()
	cache           *leaseCache // nil unless Options.CacheLeases
	own             ownSession  // the client's own session (session.go)

	mu       sync.Mutex
	closed   bool
	deadAddr map[string]time.Time // addresses whose last dial failed, and when
	dialErr  error                // the last dial's error (nil after a success)
	cur      *wsConn              // the live connection, nil while (re)connecting
	ready    chan struct{}        // closed when cur is set (or the client closes); then replaced
	calls    sync.WaitGroup

	closeOnce sync.Once
}

var _ lock.Locker = (*Client)(nil)

// New returns a client of the gateways at endpoints ("host:port", or
// ws://, wss://, http:// or https:// URLs). It starts connecting in the
// background and never blocks; calls wait for the connection within their
// own deadline.
func New(endpoints []string, opts Options) (*Client, error) {
	if len(endpoints) == 0 {
		return nil, errors.New("lockgate client: no endpoints")
	}
	// TLS is all or nothing: a bare host:port (and every redirect, which
	// names a bare address) is dialled as wss:// when any endpoint is.
	secure := opts.TLSConfig != nil
	for _, e := range endpoints {
		u, err := wsURL(e, false)
		if err != nil {
			return nil, err
		}
		secure = secure || strings.HasPrefix(u, "wss:")
	}
	for _, e := range endpoints {
		if u, _ := wsURL(e, secure); secure && !strings.HasPrefix(u, "wss:") {
			return nil, fmt.Errorf("lockgate client: endpoint %q is plaintext (ws:// or http://) while the client speaks TLS (Options.TLSConfig, or a wss:// or https:// endpoint)", e)
		}
	}
	opts.fill()
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{
		endpoints: append([]string(nil), endpoints...),
		secure:    secure,
		opts:      opts,
		log:       opts.Logger,
		ctx:       ctx,
		cancel:    cancel,
		stop:      make(chan struct{}),
		runDone:   make(chan struct{}),
		ready:     make(chan struct{}),
		connected: make(chan struct{}),
	}
	if opts.CacheLeases {
		c.cache = newLeaseCache(c)
	}
	go c.run()
	return c, nil
}

// ClientID is the owner recorded for locks acquired without an explicit one.
func (c *Client) ClientID() string { return c.opts.ClientID }

// Endpoint is the address of the gateway the client is connected to (after
// redirects: the leader's), or "" while it is (re)connecting.
func (c *Client) Endpoint() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cur == nil {
		return ""
	}
	return c.cur.addr
}

// Close implements lock.Locker: waiting Acquire calls cancel their waits on
// the gateway (releasing a grant that raced in) and return lock.ErrClosed,
// auto-renewals and the session's keep-alive stop (the session is not
// closed: its leases run out like the others), later calls return lock.ErrClosed, and the connection
// closes. Held leases stay held on the server until their TTL unless
// released first. Close is idempotent.
func (c *Client) Close() error {
	c.closeOnce.Do(func() {
		if c.cache != nil {
			c.cache.close() // releases the unused leases while calls still go out
		}
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
		// Let the waits cancel themselves on the connection, bounded.
		idle := make(chan struct{})
		go func() { c.calls.Wait(); close(idle) }()
		select {
		case <-idle:
		case <-time.After(c.opts.RequestTimeout):
			c.log.Warn("lockgate client: Close: calls still in flight; closing the connection under them")
		}
		close(c.stop)
		<-c.runDone
	})
	return nil
}

// enter registers an in-flight call; false once the client is closed.
func (c *Client) enter() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.calls.Add(1)
	return true
}

func (c *Client) leave() { c.calls.Done() }

func (c *Client) newID() string { return strconv.FormatUint(c.nextID.Add(1), 36) }

// run keeps a connection to a gateway until Close.
func (c *Client) run() {
	defer close(c.runDone)
	defer func() {
		c.mu.Lock()
		close(c.ready) // wake waiters for good: closed is set
		c.ready = make(chan struct{})
		c.mu.Unlock()
	}()
	var (
		attempt  int
		next     string // a redirect target, dialled without backoff
		avoid    string // the gateway that just failed us
		lastAddr string
	)
	for {
		if c.ctx.Err() != nil {
			<-c.stop
			return
		}
		addr := next
		if addr == "" {
			addr = c.pick(avoid)
		}
		next = ""
		wc, err := c.dial(c.ctx, addr)
		c.noteDial(addr, err)
		if err != nil {
			if c.ctx.Err() != nil {
				continue
			}
			attempt++
			c.log.Info("lockgate client: connect failed", "addr", addr, "attempt", attempt, "err", err)
			avoid = addr
			if !c.pause(attempt) {
				<-c.stop
				return
			}
			continue
		}
		lastAddr = wc.addr
		c.log.Debug("lockgate client: connected", "addr", wc.addr)
		c.signalsWanted.Store(wc.wanted)
		c.features.Store(uint32(wc.features))
		c.mu.Lock()
		select {
		case <-c.connected:
		default:
			close(c.connected)
		}
		c.cur = wc
		close(c.ready)
		c.ready = make(chan struct{})
		c.mu.Unlock()

		select {
		case <-wc.done:
		case <-c.stop:
			wc.goAway()
			<-wc.done
			c.mu.Lock()
			c.cur = nil
			c.mu.Unlock()
			return
		}
		c.mu.Lock()
		c.cur = nil
		c.mu.Unlock()

		cause, redirect, avoidIt := wc.ended()
		avoid = ""
		if avoidIt {
			avoid = lastAddr
		}
		if redirect != "" {
			next = redirect
			continue
		}
		c.log.Info("lockgate client: connection lost", "addr", wc.addr, "err", cause)
		if wc.useful.Load() || time.Since(wc.born) > 10*time.Second {
			attempt = 0 // a connection that worked: reconnect at once
			continue
		}
		attempt++
		if !c.pause(attempt) {
			<-c.stop
			return
		}
	}
}

// deadFor is how long a redirect to an address that could not be dialled
// is not followed: during an election followers keep naming the old leader
// for a while, and leaving a working connection for it would only fail again.
const deadFor = time.Second

func (c *Client) noteDial(addr string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dialErr = err
	if err == nil {
		delete(c.deadAddr, addr)
		return
	}
	if c.deadAddr == nil {
		c.deadAddr = map[string]time.Time{}
	}
	c.deadAddr[addr] = time.Now()
}

// orDialErr is last, or when there is none (the call never reached a
// gateway) the last dial's error: a refused token or certificate then
// shows in the call's error instead of a bare timeout.
func (c *Client) orDialErr(last error) error {
	if last != nil {
		return last
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.dialErr
}

// dead reports whether a dial of addr failed less than deadFor ago.
func (c *Client) dead(addr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	at, ok := c.deadAddr[addr]
	return ok && time.Since(at) < deadFor
}

// pick returns a random endpoint, other than avoid where possible.
func (c *Client) pick(avoid string) string {
	n := len(c.endpoints)
	i := rand.IntN(n)
	if n > 1 && c.endpoints[i] == avoid {
		i = (i + 1 + rand.IntN(n-1)) % n
	}
	return c.endpoints[i]
}

// pause sleeps the backoff before retry number attempt; false when the
// client closed meanwhile.
func (c *Client) pause(attempt int) bool {
	return c.backoff(context.Background(), attempt)
}

// conn waits for the live connection.
func (c *Client) conn(ctx context.Context) (*wsConn, error) {
	for {
		c.mu.Lock()
		wc, ready, closed := c.cur, c.ready, c.closed
		c.mu.Unlock()
		if closed {
			return nil, lock.ErrClosed
		}
		if wc != nil {
			select {
			case <-wc.done: // failed; run replaces it and closes ready
			default:
				return wc, nil
			}
		}
		select {
		case <-ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-c.ctx.Done():
			return nil, lock.ErrClosed
		}
	}
}

// sleep waits d; false if ctx ended first.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// opCtx bounds a one-shot call by RequestTimeout when ctx has no deadline.
func (c *Client) opCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, c.opts.RequestTimeout)
}

// gaveUp is the error of a call whose context (or the client) ended before
// it was answered. last is the last transient failure, if any.
func (c *Client) gaveUp(parent, ctx context.Context, what string, last error) error {
	if c.ctx.Err() != nil && parent.Err() == nil && ctx.Err() == nil {
		return lock.ErrClosed
	}
	if err := parent.Err(); err != nil {
		if last != nil {
			return fmt.Errorf("lockgate client: %s: %w (last failure: %w)", what, err, last)
		}
		return fmt.Errorf("lockgate client: %s: %w", what, err)
	}
	// Only our own RequestTimeout ran out: the gateway did not answer.
	if last != nil {
		var nl *lock.NotLeaderError
		if errors.As(last, &nl) {
			return last
		}
		return fmt.Errorf("lockgate client: %s: no answer within %v: %w", what, c.opts.RequestTimeout, errors.Join(lock.ErrUnavailable, last))
	}
	return fmt.Errorf("lockgate client: %s: no answer within %v: %w", what, c.opts.RequestTimeout, lock.ErrUnavailable)
}
