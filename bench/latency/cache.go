package latency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// The workloads of the lease cache: affinity, which a cache
// serves, and wanted, which measures the signal its reclaim rests on.

// Defaults of the affinity workload.
const (
	DefaultAffinityKeys       = 8
	DefaultAffinitySharedKeys = 4
	DefaultAffinityShared     = 0.05
)

// AffinityConfig shapes the affinity workload.
type AffinityConfig struct {
	// Keys is the number of keys each client has of its own.
	Keys int
	// SharedKeys is the number of keys in the pool every client shares.
	SharedKeys int
	// Shared is the probability (0 to 1) that a cycle takes a key of the
	// shared pool instead of one of the client's own.
	Shared float64
}

// DefaultAffinity is 8 keys per client, 5 % of the cycles on a pool of 4
// shared keys.
func DefaultAffinity() *AffinityConfig {
	return &AffinityConfig{Keys: DefaultAffinityKeys, SharedKeys: DefaultAffinitySharedKeys, Shared: DefaultAffinityShared}
}

func (a *AffinityConfig) validate() error {
	switch {
	case a.Keys < 1 || a.Keys > 1<<16:
		return fmt.Errorf("affinity keys %d: want 1 to 65536 keys per client", a.Keys)
	case !(a.Shared >= 0 && a.Shared <= 1):
		return fmt.Errorf("shared %v: want a probability from 0 to 1", a.Shared)
	case a.Shared > 0 && (a.SharedKeys < 1 || a.SharedKeys > 1<<16):
		return fmt.Errorf("shared keys %d: want 1 to 65536 when shared is above 0", a.SharedKeys)
	}
	return nil
}

// picker returns client i's choice of key for each cycle: one of shared
// with probability Shared, else one of its own Keys keys, uniformly.
func (a *AffinityConfig) picker(prefix string, i int, shared []string) func() string {
	own := make([]string, a.Keys)
	for k := range own {
		own[k] = fmt.Sprintf("%s/%d/%d", prefix, i, k)
	}
	rng := rand.New(rand.NewPCG(rand.Uint64(), uint64(i)))
	return func() string {
		if len(shared) > 0 && rng.Float64() < a.Shared {
			return shared[rng.IntN(len(shared))]
		}
		return own[rng.IntN(len(own))]
	}
}

// latencyTarget is one Conn (backend × path × cache) and its runs by workload.
type latencyTarget struct {
	conn  *provision.Conn
	cache string
	runs  map[string]*Run
	// sampler reads the resources of the measured rounds; nil: none.
	sampler *sampler
	// traced: its requests carry a sampled trace context (trace.go).
	traced bool
}

// measure runs workload w on t for d, recording into r when not nil, and
// adds what the clients' lease caches did to r. A cache-on target's
// clients are then closed, which releases every lease their caches kept,
// and reopened: the next round of any run starts with no cached lease of
// this one still held, renewed, or released in the background.
// The resources a recorded round used are read around the workload
// alone, not around the reopening.
func (t *latencyTarget) measure(ctx context.Context, w string, cfg LatencyConfig, d time.Duration, r *Run) (roundResult, error) {
	before := t.conn.CacheStats()
	var mark *usageMark
	if r != nil && t.sampler != nil {
		mark = t.sampler.begin(t.conn.Backend)
	}
	if t.traced {
		ctx = tracedCtx(ctx)
	}
	rr, err := runWorkload(ctx, t.conn, w, cfg, d, r)
	if err != nil {
		return rr, err
	}
	if mark != nil {
		t.sampler.end(mark, t.conn.Backend, r)
	}
	if t.cache != CacheOn {
		return rr, nil
	}
	if r != nil {
		after := t.conn.CacheStats()
		if r.CacheStats == nil {
			r.CacheStats = &CacheStats{}
		}
		r.CacheStats.Hits += after.Hits - before.Hits
		r.CacheStats.Misses += after.Misses - before.Misses
		r.CacheStats.Kept += after.Kept - before.Kept
		r.CacheStats.Reclaimed += after.Reclaimed - before.Reclaimed
		r.CacheStats.Idle += after.Idle - before.Idle
	}
	if err := t.conn.Reopen(); err != nil {
		return rr, fmt.Errorf("bench: reopening the cached clients of %s: %w", t.conn.Backend, err)
	}
	return rr, nil
}

// CacheStats totals the SDK lease caches' counters (client.CacheStats)
// over a run's clients and measured rounds.
type CacheStats struct {
	// Hits are acquires answered from a cache, without a round trip.
	Hits uint64 `json:"hits"`
	// Misses are acquires that went to the server with the cache on.
	Misses uint64 `json:"misses"`
	// Kept are releases that kept the lease in the cache.
	Kept uint64 `json:"kept"`
	// Reclaimed are kept leases released because another client waited.
	Reclaimed uint64 `json:"reclaimed"`
	// Idle are kept leases released after the cache's idle time.
	Idle uint64 `json:"idle"`
}

func (s *CacheStats) text() string {
	if s == nil {
		return "-"
	}
	return fmt.Sprintf("%d/%d/%d", s.Hits, s.Misses, s.Reclaimed)
}

// noteDirectCache notes, once, that cache on was not measured on the
// direct path.
func (rep *Report) noteDirectCache() {
	const note = "cache on applies to --via gateway only: the direct path is each backend's own Locker, which has no lease cache; direct runs are measured with the cache off"
	for _, n := range rep.Notes {
		if n == note {
			return
		}
	}
	rep.Notes = append(rep.Notes, note)
}

// The wanted workload's floor, as the lease cache's goal states it:
// from a waiter's Acquire to its holder hearing Wanted, one commit and one
// round trip (the request in, the push out: two halves). It is generous to
// raftlock, whose leader marks the holder as the waiter queues, with no
// commit; a backend whose waiters mark their store pays a write.
const (
	WantedCommits = 1
	WantedRTTs    = 1
)

// SignalFloor sets the wanted workload's p50 beside its floor.
type SignalFloor struct {
	// CommitUS and RTTUS are the backend's commit floor and the loopback
	// round trip measured in the same run; GatewayRTTUS the hop a gateway
	// in front of a backend adds (0 for raftlock, whose nodes serve the
	// gateway protocol themselves).
	CommitUS     float64 `json:"commit_us"`
	RTTUS        float64 `json:"rtt_us"`
	GatewayRTTUS float64 `json:"gateway_rtt_us,omitempty"`
	// FloorUS = WantedCommits·commit + WantedRTTs·rtt + the gateway's hop.
	FloorUS float64 `json:"floor_us"`
	// P50US is the run's p50; Within reports P50US ≤ FloorUS.
	P50US  float64 `json:"p50_us"`
	Within bool    `json:"within"`
}

// signalFloor sets a wanted run's p50 beside its floor (nil for another
// workload, a skipped run, or a backend without floor figures).
func (f *Floor) signalFloor(r *Run) *SignalFloor {
	bf, ok := f.of(r.Backend)
	if !ok || r.Skipped || r.Workload != Wanted {
		return nil
	}
	sf := &SignalFloor{CommitUS: bf.CommitUS, RTTUS: f.RTT.P50, P50US: r.LatencyUS.P50}
	if r.Via == provision.Gateway && provision.KindOf(r.Backend) != backends.KindRaft {
		sf.GatewayRTTUS = GatewayHandoffRTTs * f.RTT.P50
	}
	sf.FloorUS = WantedCommits*sf.CommitUS + WantedRTTs*sf.RTTUS + sf.GatewayRTTUS
	sf.Within = sf.P50US > 0 && sf.P50US <= sf.FloorUS
	return sf
}

// errNoWanted: the wanted workload's holders do not signal wanted.
var errNoWanted = errors.New("bench: the Locker does not signal wanted")

// wantedWait bounds a holder's wait for Wanted once its waiter queued: a
// backend that claims the signal and never sends it is counted
// (no_wanted), not waited on until the round ends.
const wantedWait = 10 * time.Second

// runWanted runs the wanted workload on conn for d: clients 2i (holder)
// and 2i+1 (waiter) share key i. Each cycle the holder acquires; the waiter
// starts its Acquire at t0; the holder's Wanted closes at t1 and t1−t0 is
// recorded; the holder releases, the waiter is granted and releases. It
// returns errNoWanted, measuring nothing, when a holder's Locker does not
// signal wanted.
func runWanted(ctx context.Context, conn *provision.Conn, cfg LatencyConfig, d time.Duration, r *Run) (roundResult, error) {
	rc := &recorder{hist: report.NewHist(), kinds: map[string]int64{}}
	clients := conn.Clients[:clientsOf(Wanted, len(conn.Clients))]
	prefix := fmt.Sprintf("bench/%s/%d/%d", Wanted, time.Now().UnixNano(), runSeq.Add(1))
	opts := lock.AcquireOptions{TTL: cfg.TTL}
	for i := 0; i < len(clients); i += 2 {
		ok, err := signalsWanted(ctx, clients[i], fmt.Sprintf("%s/probe/%d", prefix, i), opts)
		if err != nil {
			return roundResult{}, err
		}
		if !ok {
			return roundResult{}, errNoWanted
		}
	}

	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	for i := 0; i < len(clients); i += 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p := wantedPair{holder: clients[i], waiter: clients[i+1], key: fmt.Sprintf("%s/%d", prefix, i/2), opts: opts, rc: rc}
			for runCtx.Err() == nil {
				p.cycle(ctx, runCtx)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := ctx.Err(); err != nil {
		return roundResult{}, err
	}
	return rc.finish(elapsed, r), nil
}

// signalsWanted reports whether l signals wanted. An SDK client knows only
// once it has connected (the gateway announces it), so a Locker that
// implements lock.WantedSignaler and says no is asked again after one
// acquire and release of probe.
func signalsWanted(ctx context.Context, l lock.Locker, probe string, opts lock.AcquireOptions) (bool, error) {
	if lock.SignalsWanted(l) {
		return true, nil
	}
	if _, ok := l.(lock.WantedSignaler); !ok {
		return false, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	lease, err := l.Acquire(pctx, probe, opts)
	if err != nil {
		return false, fmt.Errorf("bench: wanted probe: %w", err)
	}
	if err := l.Release(pctx, lease); err != nil {
		return false, fmt.Errorf("bench: wanted probe: %w", err)
	}
	return lock.SignalsWanted(l), nil
}

// wantedPair is one holder and one waiter of the wanted workload.
type wantedPair struct {
	holder, waiter lock.Locker
	key            string
	opts           lock.AcquireOptions
	rc             *recorder
}

type acquired struct {
	lease *lock.Lease
	err   error
}

// cycle runs one cycle of the pair (see runWanted). Releases are bounded
// by ctx, not by the round: a lock left held would stall the next round.
func (p *wantedPair) cycle(ctx, runCtx context.Context) {
	held, err := p.holder.Acquire(runCtx, p.key, p.opts)
	if err != nil {
		if runCtx.Err() == nil {
			p.rc.fail(err)
		}
		return
	}
	wanted := held.Wanted()
	if held.IsWanted() {
		// Someone queued before the waiter did: a waiter of an earlier
		// cycle that gave up late. Not a sample.
		p.release(ctx, p.holder, held)
		return
	}
	got := make(chan acquired, 1)
	t0 := time.Now()
	go func() {
		l, err := p.waiter.Acquire(runCtx, p.key, p.opts)
		got <- acquired{l, err}
	}()
	timeout := time.NewTimer(wantedWait)
	defer timeout.Stop()
	var early *acquired
	select {
	case <-wanted:
		p.rc.latency(time.Since(t0))
		p.rc.ops.Add(1)
	case a := <-got:
		// The waiter returned while the holder held the key: an error
		// (unless the round ended), or a grant that broke the lock.
		early = &a
		if a.err == nil {
			p.rc.kind("granted_while_held")
		} else if runCtx.Err() == nil {
			p.rc.fail(a.err)
		}
	case <-held.Done():
		p.rc.fail(held.Err())
	case <-timeout.C:
		p.rc.kind("no_wanted")
	case <-runCtx.Done():
	}
	p.release(ctx, p.holder, held)
	a := early
	if a == nil {
		v := <-got
		a = &v
		if a.err != nil && runCtx.Err() == nil {
			p.rc.fail(a.err)
		}
	}
	if a.err == nil {
		p.release(ctx, p.waiter, a.lease)
	}
}

func (p *wantedPair) release(ctx context.Context, l lock.Locker, lease *lock.Lease) {
	relCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := l.Release(relCtx, lease); err != nil {
		p.rc.fail(err)
	}
}

// kind counts one error of a kind the workload names itself.
func (rc *recorder) kind(k string) {
	rc.mu.Lock()
	rc.kinds[k]++
	rc.mu.Unlock()
}
