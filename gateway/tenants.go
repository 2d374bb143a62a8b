package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/lockgate/lockgate/lock"
)

// Tenants (docs/security.md, "Tenants"): every request has the named
// identity of its credential; the policy (policy.go) says what it may do
// on which keys and how much it may hold. tenantLocker is the one place
// that enforces both for every entry point (WebSocket, REST, tickets):
// the gateway calls the backend through it.

// Anonymous is the identity of requests to a gateway that checks no
// tokens (every such client is one tenant).
const Anonymous = "anonymous"

// otherIdentities pools, in metrics, the identities the policy does not
// name: the label's cardinality is bounded by the policy.
const otherIdentities = "other"

// Caller is who made a request, as the gateway's credential check found it.
type Caller struct {
	Identity string
	Remote   string
	// rated: the entry point took the request's token from the rate
	// bucket itself (a WebSocket connection's reader, which throttles the
	// connection on a refusal): tenantLocker must not take another.
	rated bool
}

type callerKey struct{}

// withCaller returns ctx carrying c.
func withCaller(ctx context.Context, c Caller) context.Context {
	return context.WithValue(ctx, callerKey{}, c)
}

// CallerOf returns the caller ctx carries (the anonymous one if none).
func CallerOf(ctx context.Context) Caller {
	if c, ok := ctx.Value(callerKey{}).(Caller); ok {
		return c
	}
	return Caller{Identity: Anonymous}
}

// identify returns the identity of r's credential; ok false: none that
// the gateway accepts.
func (g *Gateway) identify(r *http.Request) (string, bool) {
	if g.opts.Tokens != nil {
		tok, has := bearer(r)
		// Identify runs even without a header, so that the two cases take alike.
		if id, ok := g.opts.Tokens.Identify(tok); ok && has {
			return id, true
		}
	}
	if g.opts.AlsoIdentify != nil {
		if id, ok := g.opts.AlsoIdentify(r); ok {
			return id, true
		}
	}
	if g.opts.Tokens == nil {
		return Anonymous, true
	}
	return "", false
}

// Policy is the policy in force (nil: none).
func (g *Gateway) Policy() *Policy { return g.opts.Policy.Get() }

// Readable reports whether identity may read key under the policy in
// force.
func (g *Gateway) Readable(identity, key string) bool {
	return g.Policy().Allowed(identity, PermRead, key)
}

// QuotaError is a refusal by quota (wire code quota_exceeded).
type QuotaError struct {
	Identity string
	Quota    string // "sessions", "leases", "waiters", "watches"
	Limit    int
}

func (e *QuotaError) Error() string {
	return fmt.Sprintf("%v: identity %q is at its quota of %d %s (release or close some first)", lock.ErrQuotaExceeded, e.Identity, e.Limit, e.Quota)
}

// Unwrap returns lock.ErrQuotaExceeded.
func (e *QuotaError) Unwrap() error { return lock.ErrQuotaExceeded }

// RateError is a refusal by rate (wire code rate_limited).
type RateError struct {
	Identity string
	RetryIn  time.Duration
}

func (e *RateError) Error() string {
	return fmt.Sprintf("%v: identity %q sends requests faster than its rate; retry in %v", lock.ErrRateLimited, e.Identity, e.RetryIn.Round(time.Millisecond))
}

// Unwrap returns lock.ErrRateLimited.
func (e *RateError) Unwrap() error { return lock.ErrRateLimited }

func forbidden(identity string, perm Perm, keys []string) error {
	what := "this"
	switch len(keys) {
	case 0:
	case 1:
		what = fmt.Sprintf("key %q", keys[0])
	default:
		what = fmt.Sprintf("keys %q", keys)
	}
	return fmt.Errorf("%w: identity %q may not %s %s (the policy's rules)", lock.ErrForbidden, identity, perm, what)
}

// tenancy is the gateway's per-identity state: what it counts itself
// (waiting acquires and watches always; leases and sessions over a
// backend that does not record identities), in-flight reservations, and
// each identity's rate limiter.
type tenancy struct {
	g   *Gateway
	rec lock.IdentityRecorder // nil: this gateway counts leases and sessions

	mu sync.Mutex
	ts map[string]*tenant
	// leases and sessions this gateway granted, over a backend that does
	// not record identities: by lock token and by session id.
	leases   map[string]heldLease
	sessions map[string]heldSession

	refusals *prometheus.CounterVec
	usage    *prometheus.GaugeVec
}

type heldLease struct {
	identity string
	deadline time.Time
}

type heldSession struct {
	identity string
	s        *lock.Session
}

type tenant struct {
	// acquiring: leases being acquired (not yet in the backend's count);
	// opening: sessions being opened.
	acquiring, opening int
	waiters, watches   int
	// leases and sessions: the gateway's own count (no recorder).
	leases, sessions int
	limiter          *rate.Limiter
	limit            Quotas // the quotas limiter was made for
}

func newTenancy(g *Gateway) *tenancy {
	t := &tenancy{g: g, ts: map[string]*tenant{}, leases: map[string]heldLease{}, sessions: map[string]heldSession{}}
	t.rec, _ = g.l.(lock.IdentityRecorder)
	t.refusals = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "lockgate_identity_refusals_total",
		Help: "Requests refused by an identity's permissions or quotas, by identity (those the policy names; others pooled as \"other\") and reason (forbidden, rate, sessions, leases, waiters, watches)."},
		[]string{"identity", "reason"})
	t.usage = prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "lockgate_identity_usage",
		Help: "What each identity holds, by identity (named by the policy; others pooled as \"other\") and resource (sessions, leases, waiters, watches): cluster-wide for sessions and leases on raftlock, this gateway's otherwise."},
		[]string{"identity", "resource"})
	return t
}

// label is identity as a metric label.
func (t *tenancy) label(identity string) string {
	if t.g.Policy().Names(identity) || identity == Anonymous {
		return identity
	}
	return otherIdentities
}

// tenant returns identity's state (t.mu held).
func (t *tenancy) tenant(identity string) *tenant {
	tn := t.ts[identity]
	if tn == nil {
		tn = &tenant{}
		t.ts[identity] = tn
	}
	return tn
}

// prune drops identity's state when it holds nothing (t.mu held).
func (t *tenancy) prune(identity string, tn *tenant) {
	if tn.acquiring == 0 && tn.opening == 0 && tn.waiters == 0 && tn.watches == 0 && tn.leases == 0 && tn.sessions == 0 &&
		(tn.limiter == nil || tn.limiter.Tokens() >= float64(tn.limit.Burst)) {
		delete(t.ts, identity)
	}
}

func (t *tenancy) refused(identity, reason string, err error) error {
	t.refusals.WithLabelValues(t.label(identity), reason).Inc()
	return err
}

// allow checks that identity has perm on keys.
func (t *tenancy) allow(identity string, perm Perm, keys ...string) error {
	if !t.g.Policy().Allowed(identity, perm, keys...) {
		return t.refused(identity, "forbidden", forbidden(identity, perm, keys))
	}
	return nil
}

// maxThrottle bounds how long an entry point holds a rate-limited
// identity's connection (the reader of a WebSocket connection, a REST
// answer) before it reads or answers again: refusals then cost the
// server one per connection per throttle, not one per request the client
// can send. Kubernetes' API Priority and Fairness queues the excess the
// same way rather than answering it at once.
const maxThrottle = time.Second

// throttle waits min(retry, maxThrottle) or until ctx ends.
func throttle(ctx context.Context, retry time.Duration) {
	t := time.NewTimer(min(retry, maxThrottle))
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// rateOf takes one request from ctx's caller's bucket, unless its entry
// point did.
func (t *tenancy) rateOf(ctx context.Context) error {
	c := CallerOf(ctx)
	if c.rated {
		return nil
	}
	return t.rate(c.Identity)
}

// rate takes one request from identity's token bucket.
func (t *tenancy) rate(identity string) error {
	q := t.g.Policy().Quotas(identity)
	if q.Rate <= 0 {
		return nil
	}
	t.mu.Lock()
	tn := t.tenant(identity)
	if tn.limiter == nil || tn.limit.Rate != q.Rate || tn.limit.Burst != q.Burst {
		tn.limiter, tn.limit = rate.NewLimiter(rate.Limit(q.Rate), q.Burst), q
	}
	lim := tn.limiter
	t.mu.Unlock()
	r := lim.Reserve()
	if d := r.Delay(); d > 0 {
		r.Cancel()
		return t.refused(identity, "rate", &RateError{Identity: identity, RetryIn: d})
	}
	return nil
}

// used returns identity's leases and sessions held (t.mu held).
func (t *tenancy) used(identity string, tn *tenant) (leases, sessions int) {
	if t.rec != nil {
		return t.rec.IdentityUsage(identity)
	}
	return tn.leases, tn.sessions
}

// reserve counts n of resource for identity against its quota, or
// refuses; the returned func gives the reservation back.
func (t *tenancy) reserve(identity, resource string, n int) (func(), error) {
	q := t.g.Policy().Quotas(identity)
	t.mu.Lock()
	defer t.mu.Unlock()
	tn := t.tenant(identity)
	var have, limit int
	var count *int
	switch resource {
	case "leases":
		leases, _ := t.used(identity, tn)
		if t.rec == nil && leases+tn.acquiring+n > q.Leases {
			t.sweepLeases(identity, tn)
			leases = tn.leases
		}
		have, limit, count = leases+tn.acquiring, q.Leases, &tn.acquiring
	case "sessions":
		_, sessions := t.used(identity, tn)
		if t.rec == nil && sessions+tn.opening+n > q.Sessions {
			t.sweepSessions(identity, tn)
			sessions = tn.sessions
		}
		have, limit, count = sessions+tn.opening, q.Sessions, &tn.opening
	case "waiters":
		have, limit, count = tn.waiters, q.Waiters, &tn.waiters
	case "watches":
		have, limit, count = tn.watches, q.Watches, &tn.watches
	default:
		panic("gateway: unknown resource " + resource)
	}
	if have+n > limit {
		t.prune(identity, tn)
		return nil, t.refused(identity, resource, &QuotaError{Identity: identity, Quota: resource, Limit: limit})
	}
	*count += n
	var once sync.Once
	return func() {
		once.Do(func() {
			t.mu.Lock()
			*count -= n
			t.prune(identity, tn)
			t.mu.Unlock()
		})
	}, nil
}

// sweepLeases forgets identity's leases whose deadline passed (t.mu held).
func (t *tenancy) sweepLeases(identity string, tn *tenant) {
	now := time.Now()
	for h, l := range t.leases {
		if l.identity == identity && !l.deadline.After(now) {
			delete(t.leases, h)
			tn.leases--
		}
	}
}

// sweepSessions forgets identity's sessions that ended (t.mu held).
func (t *tenancy) sweepSessions(identity string, tn *tenant) {
	for id, s := range t.sessions {
		if s.identity == identity && s.s.Err() != nil {
			delete(t.sessions, id)
			tn.sessions--
		}
	}
}

// granted records leases this gateway granted (no recorder).
func (t *tenancy) granted(identity string, leases ...*lock.Lease) {
	if t.rec != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	tn := t.tenant(identity)
	for _, l := range leases {
		if _, ok := t.leases[l.Handle]; !ok {
			tn.leases++
		}
		t.leases[l.Handle] = heldLease{identity: identity, deadline: l.Deadline()}
	}
}

// ended forgets a lease that was released (no recorder).
func (t *tenancy) ended(handle string) {
	if t.rec == nil {
		t.mu.Lock()
		if l, ok := t.leases[handle]; ok {
			delete(t.leases, handle)
			tn := t.tenant(l.identity)
			tn.leases--
			t.prune(l.identity, tn)
		}
		t.mu.Unlock()
	}
}

// renewed moves a lease's deadline (no recorder).
func (t *tenancy) renewed(l *lock.Lease) {
	if t.rec == nil {
		t.mu.Lock()
		if h, ok := t.leases[l.Handle]; ok {
			h.deadline = l.Deadline()
			t.leases[l.Handle] = h
		}
		t.mu.Unlock()
	}
}

// opened records a session this gateway opened or adopted (no recorder).
func (t *tenancy) opened(identity string, s *lock.Session) {
	if t.rec != nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, ok := t.sessions[s.ID]; !ok {
		t.tenant(identity).sessions++
	}
	t.sessions[s.ID] = heldSession{identity: identity, s: s}
}

// ownsLease reports whether identity may use the lease of key with
// handle: a lease of another identity is refused as if unknown. A lease
// the gateway knows nothing of (another gateway's, over a backend that
// does not record identities) is not refused here.
func (t *tenancy) ownsLease(identity, key, handle string) bool {
	if t.rec != nil {
		id, ok := t.rec.LeaseIdentity(key, handle)
		return !ok || id == "" || id == identity
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	l, ok := t.leases[handle]
	return !ok || l.identity == identity
}

// ownsSession reports whether identity may use session id (as ownsLease).
func (t *tenancy) ownsSession(identity, id string) bool {
	if t.rec != nil {
		owner, ok := t.rec.SessionIdentity(id)
		return !ok || owner == "" || owner == identity
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	s, ok := t.sessions[id]
	return !ok || s.identity == identity
}

// notYours is the refusal of a lease or session of another identity: the
// error an unknown one gets.
func notYours(what string) error {
	if what == "session" {
		return fmt.Errorf("%w: no such session", lock.ErrSessionExpired)
	}
	return fmt.Errorf("%w: no such lease", lock.ErrNotHeld)
}

// collect refreshes the usage gauges (on a scrape).
func (t *tenancy) collect() {
	type u struct{ sessions, leases, waiters, watches int }
	sum := map[string]*u{}
	at := func(id string) *u {
		l := t.label(id)
		if sum[l] == nil {
			sum[l] = &u{}
		}
		return sum[l]
	}
	t.mu.Lock()
	for id, tn := range t.ts {
		x := at(id)
		x.waiters += tn.waiters
		x.watches += tn.watches
		if t.rec == nil {
			x.leases += tn.leases
			x.sessions += tn.sessions
		}
	}
	t.mu.Unlock()
	if er, ok := t.rec.(interface {
		EachIdentityUsage(func(identity string, leases, sessions int))
	}); ok {
		er.EachIdentityUsage(func(id string, leases, sessions int) {
			x := at(id)
			x.leases += leases
			x.sessions += sessions
		})
	}
	t.usage.Reset()
	for l, x := range sum {
		t.usage.WithLabelValues(l, "sessions").Set(float64(x.sessions))
		t.usage.WithLabelValues(l, "leases").Set(float64(x.leases))
		t.usage.WithLabelValues(l, "waiters").Set(float64(x.waiters))
		t.usage.WithLabelValues(l, "watches").Set(float64(x.watches))
	}
}

// usageCollector refreshes the gauges when scraped.
type usageCollector struct{ t *tenancy }

func (c usageCollector) Describe(ch chan<- *prometheus.Desc) {
	c.t.refusals.Describe(ch)
	c.t.usage.Describe(ch)
}

func (c usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.t.collect()
	c.t.refusals.Collect(ch)
	c.t.usage.Collect(ch)
}
