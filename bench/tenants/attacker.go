package tenants

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	mrand "math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// tenantsAttacker is the attacker of the beside phase: floods at and
// beyond each quota, the hammer, and the forbidden probe.
type tenantsAttacker struct {
	r     *tenantsRun
	eps   []string
	token string
	quota TenantQuota
	conns int
	start time.Time
	end   time.Time // the phase's planned end
	d     time.Duration

	floods  []*tenantsFlood
	quotas  map[string]*tenantsQuotaCounter
	hammer  *tenantsFlood
	stopped time.Time

	hammerAt         atomic.Int64 // ns after start; -1 until the hammer starts
	forbiddenGranted atomic.Int64
	watchEvents      atomic.Int64

	wg           sync.WaitGroup
	mu           sync.Mutex
	clients      []*client.Client
	rests        []*tenantsREST
	ownSessions  map[*lock.Session]bool
	otherRefusal map[string]int // quota_exceeded naming a quota no counter has
}

// tenantsFlood is one flood's tallies.
type tenantsFlood struct {
	name string
	q    *tenantsQuotaCounter // the quota it presses (nil: none)
	cap  int                  // 0: none
	// pauses scales its workers' pauses: a flood with n times the
	// workers of the others waits n times as long, so that it presses
	// its quota as hard as they do theirs.
	pauses int

	attempts, succeeded, held, peak atomic.Int64
	limited                         atomic.Bool // refused for a limit, or at its cap

	mu       sync.Mutex
	refusals map[string]int
	errs     map[string]int
}

// tenantsQuotaCounter follows one of the attacker's quotas across its
// floods.
type tenantsQuotaCounter struct {
	name                 string
	limit                int
	order                int // in the report
	live, peak, refusals atomic.Int64
	refusedAt            atomic.Int64 // live at the first quota_exceeded; -1 before
}

func atomicMax(a *atomic.Int64, v int64) {
	for {
		old := a.Load()
		if v <= old || a.CompareAndSwap(old, v) {
			return
		}
	}
}

func (q *tenantsQuotaCounter) add(n int64) { atomicMax(&q.peak, q.live.Add(n)) }

// add counts n more (or fewer) of what the flood holds.
func (f *tenantsFlood) add(n int64) {
	atomicMax(&f.peak, f.held.Add(n))
	if f.q != nil {
		f.q.add(n)
	}
}

func newTenantsAttacker(r *tenantsRun, start time.Time, d time.Duration) *tenantsAttacker {
	a := &tenantsAttacker{r: r, eps: r.c.APIAddrs, token: r.files.AttackerToken, quota: r.cfg.Policy.QuotaOf(TenantAttacker),
		conns: r.cfg.AttackConns, start: start, end: start.Add(d), d: d,
		quotas: map[string]*tenantsQuotaCounter{}, ownSessions: map[*lock.Session]bool{}, otherRefusal: map[string]int{}}
	a.hammerAt.Store(-1)
	for i, q := range []struct {
		name  string
		limit int
	}{{QuotaSessions, a.quota.Sessions}, {QuotaLeases, a.quota.Leases}, {QuotaWaiters, a.quota.Waiters}, {QuotaWatches, a.quota.Watches}} {
		c := &tenantsQuotaCounter{name: q.name, limit: q.limit, order: i}
		c.refusedAt.Store(-1)
		a.quotas[q.name] = c
	}
	return a
}

func (a *tenantsAttacker) flood(name, quota string, cap int) *tenantsFlood {
	f := &tenantsFlood{name: name, q: a.quotas[quota], cap: cap, pauses: 1, refusals: map[string]int{}, errs: map[string]int{}}
	a.floods = append(a.floods, f)
	return f
}

func (a *tenantsAttacker) newClient(id string, noSession bool) (*client.Client, error) {
	c, err := client.New(a.eps, client.Options{Token: a.token, ClientID: id, NoSession: noSession})
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.clients = append(a.clients, c)
	a.mu.Unlock()
	return c, nil
}

// go runs f on a goroutine the attacker's run waits for.
func (a *tenantsAttacker) goRun(f func()) {
	a.wg.Add(1)
	go func() {
		defer a.wg.Done()
		f()
	}()
}

// refused counts a refusal of f's request.
func (a *tenantsAttacker) refused(f *tenantsFlood, code, quota string) {
	f.mu.Lock()
	f.refusals[code]++
	f.mu.Unlock()
	switch code {
	case CodeQuotaExceeded:
		if quota == "" && f.q != nil {
			quota = f.q.name
		}
		if q := a.quotas[quota]; q != nil {
			q.refusals.Add(1)
			q.refusedAt.CompareAndSwap(-1, q.live.Load())
		} else {
			a.mu.Lock()
			a.otherRefusal[cmp.Or(quota, "unnamed")]++
			a.mu.Unlock()
		}
		f.limited.Store(true)
	case CodeTooManySessions, codeTooManyWaiters, codeTooManyWatches, codeTooManyLocks, codeTooManyTickets:
		f.limited.Store(true)
	}
}

func (f *tenantsFlood) errored(what string) {
	f.mu.Lock()
	f.errs[what]++
	f.mu.Unlock()
}

// attempt makes one request of f with step and counts its outcome; code
// is its refusal code ("" for a success or another error). A request
// cut short by the phase's end is not counted.
func (a *tenantsAttacker) attempt(ctx context.Context, f *tenantsFlood, step func(context.Context) error) (code string, err error) {
	f.attempts.Add(1)
	err = step(ctx)
	if err == nil {
		f.succeeded.Add(1)
		return "", nil
	}
	if ctx.Err() != nil {
		f.attempts.Add(-1)
		return "", err
	}
	code, quota := tenantsRefusal(err)
	if code != "" {
		a.refused(f, code, quota)
	} else {
		f.errored(tenantsErrKind(err))
	}
	return code, err
}

// climb runs step until ctx ends: up to f's cap, then at the cap it asks
// again every tenantsBeyondPause. After a refusal it waits
// tenantsBeyondPause (tenantsRatePause after rate_limited), each scaled
// by f.pauses — unless flat, the hammer's way: at once.
func (a *tenantsAttacker) climb(ctx context.Context, f *tenantsFlood, flat bool, step func(context.Context) error) {
	for ctx.Err() == nil {
		if f.cap > 0 && f.held.Load() >= int64(f.cap) {
			f.limited.Store(true)
			provision.SleepCtx(ctx, jitter(tenantsBeyondPause*time.Duration(f.pauses)))
			continue
		}
		code, err := a.attempt(ctx, f, step)
		if err == nil || flat && code != "" {
			continue
		}
		pause := tenantsErrorPause
		switch code {
		case "":
		case CodeRateLimited:
			pause = tenantsRatePause
		default:
			pause = tenantsBeyondPause
		}
		provision.SleepCtx(ctx, jitter(pause*time.Duration(f.pauses)))
	}
}

// holding counts a lease the attacker took until it ends, and the SDK
// session it is in.
func (a *tenantsAttacker) holding(ctx context.Context, f *tenantsFlood, lease *lock.Lease) {
	f.add(1)
	lease.AfterEnd(func() { f.add(-1) })
	s := lease.Session()
	if s == nil {
		return
	}
	a.mu.Lock()
	seen := a.ownSessions[s]
	a.ownSessions[s] = true
	a.mu.Unlock()
	if seen {
		return
	}
	q := a.quotas[QuotaSessions]
	q.add(1)
	a.goRun(func() {
		select {
		case <-s.Done():
			q.add(-1)
		case <-ctx.Done():
		}
	})
}

// run floods until ctx ends, and returns once every flood has stopped.
func (a *tenantsAttacker) run(ctx context.Context) {
	defer func() { a.stopped = time.Now() }()
	q := a.quota
	sessWS := a.flood(FloodSessionsWS, QuotaSessions, tenantsCap(q.Sessions))
	sessREST := a.flood(FloodSessionsREST, QuotaSessions, tenantsCap(q.Sessions))
	leasesWS := a.flood(FloodLeasesWS, QuotaLeases, tenantsCap(q.Leases))
	leasesREST := a.flood(FloodLeasesREST, QuotaLeases, tenantsCap(q.Leases))
	waiters := a.flood(FloodWaiters, QuotaWaiters, min(tenantsCap(q.Waiters), tenantsMaxRESTWaiters))
	waiters.pauses = tenantsWaiterWorkersPerConn
	watches := a.flood(FloodWatches, QuotaWatches, tenantsCap(q.Watches))
	a.hammer = a.flood(FloodHammer, QuotaLeases, 0)
	forbidden := a.flood(FloodForbidden, "", 0)

	// First the lease flood's clients, each with its session and a
	// lease, one of them holding the key the waiters queue for: before
	// the session flood takes every session the quota allows.
	leaseClients := make([]*client.Client, a.conns)
	for i := range leaseClients {
		c, err := a.newClient(fmt.Sprintf("attacker-leases-%d", i), false)
		if err != nil {
			leasesWS.errored(tenantsErrKind(err))
			return
		}
		leaseClients[i] = c
	}
	a.setup(ctx, leasesWS, leaseClients)

	a.floodSessionsWS(ctx, sessWS)
	a.floodSessionsREST(ctx, sessREST)
	a.floodLeasesWS(ctx, leasesWS, leaseClients)
	a.floodLeasesREST(ctx, leasesREST)
	a.floodWaiters(ctx, waiters)
	a.floodWatches(ctx, watches)
	a.probeForbidden(ctx, forbidden)
	a.goRun(func() { a.startHammer(ctx, []*tenantsFlood{sessWS, sessREST, leasesWS, leasesREST, waiters, watches}) })
	a.goRun(func() { a.status(ctx) })
	a.wg.Wait()
}

// setup takes the waiters' key with the first lease client and a lease
// with each other one, asking again (rate_limited, errors) for up to 5 s.
func (a *tenantsAttacker) setup(ctx context.Context, f *tenantsFlood, clients []*client.Client) {
	var wg sync.WaitGroup
	for i, c := range clients {
		key := fmt.Sprintf("%slease-%d-0", attackerPrefix, i)
		if i == 0 {
			key = tenantsHeldKey
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			deadline := time.Now().Add(5 * time.Second)
			for ctx.Err() == nil && time.Now().Before(deadline) {
				_, err := a.attempt(ctx, f, func(ctx context.Context) error {
					lease, err := c.TryAcquire(ctx, key, lock.AcquireOptions{})
					if err == nil {
						a.holding(ctx, f, lease)
					}
					return err
				})
				if err == nil {
					return
				}
				provision.SleepCtx(ctx, jitter(tenantsRatePause))
			}
		}()
	}
	wg.Wait()
}

// status prints where the attacker is every tenantsStatusEvery.
func (a *tenantsAttacker) status(ctx context.Context) {
	for provision.SleepCtx(ctx, tenantsStatusEvery) {
		var parts []string
		for _, q := range a.sortedQuotas() {
			parts = append(parts, fmt.Sprintf("%s %d/%d", q.name, q.live.Load(), q.limit))
		}
		refusals := map[string]int{}
		var n int64
		for _, f := range a.floods {
			n += f.attempts.Load()
			f.mu.Lock()
			for k, v := range f.refusals {
				refusals[k] += v
			}
			f.mu.Unlock()
		}
		a.r.progress("%6.1fs  attacker holds %s; %d requests; refusals: %s", time.Since(a.start).Seconds(), strings.Join(parts, ", "), n, fmtCounts(refusals))
	}
}

func (a *tenantsAttacker) sortedQuotas() []*tenantsQuotaCounter {
	qs := slices.Collect(maps.Values(a.quotas))
	slices.SortFunc(qs, func(x, y *tenantsQuotaCounter) int { return cmp.Compare(x.order, y.order) })
	return qs
}

// close closes the attacker's clients and connections.
func (a *tenantsAttacker) close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.clients {
		c.Close()
	}
	for _, rc := range a.rests {
		rc.tr.CloseIdleConnections()
	}
}

// result is what the attacker did.
func (a *tenantsAttacker) result() TenantsAttacker {
	res := TenantsAttacker{Refusals: map[string]int{}, Errors: map[string]int{}, QuotaRefusals: map[string]int{},
		WatchEvents: a.watchEvents.Load(), ForbiddenGranted: a.forbiddenGranted.Load(), HammerStartS: -1}
	for _, f := range a.floods {
		tf := TenantsFlood{Name: f.name, Attempts: f.attempts.Load(), Succeeded: f.succeeded.Load(), Peak: f.peak.Load(), Cap: f.cap}
		if f.q != nil {
			tf.Quota = f.q.name
		}
		f.mu.Lock()
		tf.Refusals, tf.Errors = maps.Clone(f.refusals), maps.Clone(f.errs)
		f.mu.Unlock()
		res.Attempts += tf.Attempts
		res.Succeeded += tf.Succeeded
		for k, v := range tf.Refusals {
			res.Refusals[k] += v
		}
		for k, v := range tf.Errors {
			res.Errors[f.name+": "+k] += v
		}
		res.Floods = append(res.Floods, tf)
	}
	sortedFloods(res.Floods)
	for _, q := range a.sortedQuotas() {
		tq := TenantsQuota{Name: q.name, Limit: q.limit, Peak: q.peak.Load(), RefusedAt: q.refusedAt.Load(), Refusals: q.refusals.Load()}
		res.Quotas = append(res.Quotas, tq)
		if tq.Refusals > 0 {
			res.QuotaRefusals[q.name] = int(tq.Refusals)
		}
	}
	a.mu.Lock()
	for k, v := range a.otherRefusal {
		res.QuotaRefusals[k] += v
	}
	a.mu.Unlock()
	if at := a.hammerAt.Load(); at >= 0 {
		res.HammerStartS = time.Duration(at).Seconds()
		if d := a.stopped.Sub(a.start.Add(time.Duration(at))); d > 0 {
			res.HammerPerS = float64(a.hammer.attempts.Load()) / d.Seconds()
		}
	}
	return res
}

// tenantsCap is how far a flood pressing a quota of limit goes at most.
func tenantsCap(limit int) int { return max(tenantsCapFactor*limit, tenantsMinCap) }

// ratePace returns a function that blocks until the next of rate
// requests/s may start, shared by its callers (rate 0: no pacing); it
// reports false when ctx ended first.
func ratePace(rate float64) func(ctx context.Context) bool {
	if rate <= 0 {
		return func(ctx context.Context) bool { return ctx.Err() == nil }
	}
	var mu sync.Mutex
	var next time.Time
	step := time.Duration(float64(time.Second) / rate)
	return func(ctx context.Context) bool {
		mu.Lock()
		if now := time.Now(); next.Before(now) {
			next = now
		}
		at := next
		next = next.Add(step)
		mu.Unlock()
		if d := time.Until(at); d > 0 {
			return provision.SleepCtx(ctx, d)
		}
		return ctx.Err() == nil
	}
}

// jitter is d scaled by a random factor in [0.5, 1.5).
func jitter(d time.Duration) time.Duration {
	return time.Duration(float64(d) * (0.5 + mrand.Float64()))
}
