package campaign

import (
	"context"
	"errors"
	"math"
	"slices"
	"sync/atomic"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// The lease cache in the checked history. A share of the clients
// (ChaosConfig.CacheShare) run with the SDK's client.Options.CacheLeases
// (docs/lease-cache.md): Release of a plain exclusive lease keeps it,
// unused and still held on the server, and the next Acquire of the key
// returns the same *lock.Lease (same token, no round trip); when another
// client waits, the server pushes wanted and the cache releases it for
// real, and the lease's Done closes then (as it does after an idle
// eviction, or when the lease ends otherwise).
//
// The history says what the server saw: a Release the cache kept is not a
// release. It is recorded once the lease's Done is seen closed, as a
// Release op from the application's Release call to that moment (the real
// release took effect within it): OK when the lease ended released
// (lock.ErrReleased), of unknown outcome otherwise (it ran out, or its
// release failed). An Acquire the cache answered with the lease it kept
// continues that hold: no Acquire op, as client/cache_seed_test.go counts
// the uses of one cached grant as one hold. A kept lease still unsettled
// when the campaign ends is recorded as a release of unknown outcome.
//
// The campaign's leases are not renewed (a lease lives its TTL), but the
// cache keeps its unused leases alive with its own keep-alive: such a
// lease outlives the expiry the lock model fixes at its grant, which makes
// the model accept more than it should (an expiry that did not happen),
// never raise a false alarm.

// cacheState is the workload's lease-cache counts.
type cacheState struct {
	// clients is how many clients cache; cached(i) whether client i
	// does (nil: none).
	clients int
	cached  func(i int) bool
	// hits counts the acquires answered with a kept lease, kept the
	// releases the cache kept.
	hits, kept atomic.Int64
}

// keptLease is a lease whose Release the cache kept: the Release op
// waiting for its real release.
type keptLease struct {
	lease   *lock.Lease
	rel     check.Op
	claimed atomic.Bool // settled, by the watcher or by a cache hit
}

// clientCache is one caching client's kept leases: the last one of each
// key, and all those not yet settled (nil for a client without the
// cache).
type clientCache struct {
	byKey   map[string]*keptLease
	pending []*keptLease
}

// newClientCache returns client id's kept leases, nil when it does not
// cache.
func (w *Workload) newClientCache(id int) *clientCache {
	if w.cache.cached == nil || !w.cache.cached(id) {
		return nil
	}
	return &clientCache{byKey: map[string]*keptLease{}}
}

// resumed reports whether lease, just acquired for key, is the lease the
// cache kept at the client's last release of key: the hold goes on (no
// Acquire op), and that release was none.
func (w *Workload) resumed(cc *clientCache, key string, lease *lock.Lease) bool {
	if cc == nil || cc.byKey[key] == nil {
		return false
	}
	k := cc.byKey[key]
	delete(cc.byKey, key)
	if k.lease != lease || !k.claimed.CompareAndSwap(false, true) {
		return false // another lease (the kept one went, or goes, its own way)
	}
	w.cache.hits.Add(1)
	return true
}

// kept reports whether the release rel of lease, which returned err, was
// kept by the cache (its Done is still open): it is then recorded once the
// real release is seen (watch), not now.
func (w *Workload) kept(ctx context.Context, cc *clientCache, rel check.Op, lease *lock.Lease, err error) bool {
	if cc == nil || err != nil {
		return false
	}
	select {
	case <-lease.Done():
		return false // released for real
	default:
	}
	k := &keptLease{lease: lease, rel: rel}
	cc.byKey[lease.Key] = k
	cc.pending = slices.DeleteFunc(cc.pending, func(k *keptLease) bool { return k.claimed.Load() })
	cc.pending = append(cc.pending, k)
	w.cache.kept.Add(1)
	go func() {
		select {
		case <-lease.Done():
			w.settle(k, true)
		case <-ctx.Done(): // the client settles it (settleAll)
		}
	}()
	return true
}

// settle records k's release, ended at the moment its Done was seen
// closed (done) or now, unless a cache hit or the watcher settled it
// first.
func (w *Workload) settle(k *keptLease, done bool) {
	if !k.claimed.CompareAndSwap(false, true) {
		return
	}
	rel := k.rel
	rel.End = w.Now()
	if !done {
		select {
		case <-k.lease.Done():
			done = true
		default:
		}
	}
	if done && errors.Is(k.lease.Err(), lock.ErrReleased) {
		rel.OK = true
	} else {
		rel.Unknown = true
	}
	w.Record(rel)
}

// settleAll records the releases of cc's kept leases as the client stops.
func (w *Workload) settleAll(cc *clientCache) {
	if cc == nil {
		return
	}
	for _, k := range cc.pending {
		w.settle(k, false)
	}
}

// DefaultCacheShare is ChaosConfig.CacheShare's default: a quarter of
// the clients cache.
const DefaultCacheShare = 0.25

// setReadsAndCache decides which of the campaign's clients read and cache
// (before they are opened: tg opens the caching ones with the cache on).
// Only a mutex campaign caches (the cache keeps plain exclusive leases
// only), and against servers only on raftlock, whose SDK has the cache;
// RunChaosLockers' Lockers are taken to cache as CacheShare says.
func (w *Workload) setReadsAndCache(tg *Target) {
	w.reads.on = readsCheckable(w.cfg.Backend, w.cfg.Mode)
	n := 0
	if w.cfg.Mode == ChaosExclusive && w.cfg.CacheShare > 0 && (tg.s == nil || provision.KindOf(w.cfg.Backend) == backends.KindRaft) {
		n = min(w.cfg.Clients, int(math.Round(w.cfg.CacheShare*float64(w.cfg.Clients))))
	}
	w.cache.clients, w.cache.cached = n, nil
	if n > 0 {
		clients := w.cfg.Clients
		w.cache.cached = func(i int) bool { return i >= clients-n && i < clients }
	}
	tg.cached = w.cache.cached
}
