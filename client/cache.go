package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Defaults of the lease cache (Options.CacheLeases).
const (
	DefaultCacheIdle       = 10 * time.Second
	DefaultMaxCachedLeases = 1024
)

// CacheStats counts what the lease cache did (Client.CacheStats).
type CacheStats struct {
	// Hits are acquires answered from the cache, without a round trip.
	Hits uint64
	// Misses are acquires that went to the gateway with the cache on.
	Misses uint64
	// Kept are releases that kept the lease, unused, in the cache.
	Kept uint64
	// Reclaimed are unused leases released for real because another
	// caller waited for their key (the gateway's "wanted" push).
	Reclaimed uint64
	// Idle are unused leases released for real after Options.CacheIdle.
	Idle uint64
	// Unused is how many leases the cache holds unused now.
	Unused int
}

// leaseCache keeps leases the application released, still held on the
// server and still renewed, so that the application's next acquire of the
// same key costs no round trip (the lease cache of a Chubby-style client;
// docs/lease-cache.md). A kept lease is released for real as soon as the
// gateway says another caller waits for its key, after CacheIdle unused,
// or at Close. Only one lease per key is cached: the client cannot hold a
// key twice.
type leaseCache struct {
	c *Client

	mu      sync.Mutex
	closed  bool
	entries map[string]*cacheEntry // by key
	unused  int

	hits, misses, kept, reclaimed, idle atomic.Uint64

	// bugs are deliberate defects, set only by the package's tests (the
	// seed-style counter test must catch them). The zero value is correct.
	bugs cacheBugs
}

// cacheBugs are the lease cache's deliberate defects (see leaseCache.bugs).
type cacheBugs struct {
	// reclaimKeepsLease: a reclaimed lease stays in the cache and is
	// served again (its wanted mark and its end ignored) while, and after,
	// its real release goes out: a cache that hands out what it gave back.
	reclaimKeepsLease bool
}

// cacheEntry is a lease granted with the cache on, in use by the
// application or kept unused.
type cacheEntry struct {
	lease *lock.Lease
	opts  lock.AcquireOptions // the normalized options it was acquired with
	inUse bool
	// While unused: idleAt is when it is released for real; renewAt, for a
	// lease the application did not ask to auto-renew (auto-renewed leases
	// keep their own keep-alive throughout), when the cache renews it next.
	// timer (made at the first Release, then reset: no allocation per
	// cycle) fires at the earlier of the two.
	idleAt, renewAt time.Time
	timer           *time.Timer
}

func newLeaseCache(c *Client) *leaseCache {
	return &leaseCache{c: c, entries: map[string]*cacheEntry{}}
}

// take returns the cached lease of key for an acquire with opts, marking it
// in use, or nil. stale, when not nil, is an unused lease of key that
// cannot serve opts (other options, wanted, or too close to its deadline):
// it has left the cache and the caller must release it for real before it
// asks the gateway, or it would wait behind its own lease.
func (lc *leaseCache) take(key string, opts lock.AcquireOptions) (hit, stale *lock.Lease) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	e := lc.entries[key]
	if e == nil || e.inUse {
		lc.misses.Add(1)
		return nil, nil
	}
	lc.stopLocked(e)
	if !e.serves(opts, lc.bugs.reclaimKeepsLease) {
		delete(lc.entries, key)
		lc.misses.Add(1)
		return nil, e.lease
	}
	e.inUse = true
	lc.hits.Add(1)
	return e.lease, nil
}

// serves reports whether the unused lease of e can answer an acquire with
// opts: still alive, nobody waits for it, the same options, and at least
// half its TTL left (a lease whose renewals lag is not handed out).
func (e *cacheEntry) serves(opts lock.AcquireOptions, broken bool) bool {
	l := e.lease
	return (broken || l.Err() == nil && !l.IsWanted()) && cacheable(opts) &&
		opts.Owner == e.opts.Owner && opts.TTL == e.opts.TTL && opts.AutoRenew == e.opts.AutoRenew &&
		bytes.Equal(opts.Value, e.opts.Value) && (opts.Handle == "" || opts.Handle == l.Handle) &&
		time.Until(l.Deadline()) > l.TTL()/2
}

// stopLocked ends e's unused state: its timer stops.
func (lc *leaseCache) stopLocked(e *cacheEntry) {
	if e.timer != nil {
		e.timer.Stop()
	}
	if !e.inUse {
		lc.unused--
	}
}

// hold records a lease the gateway granted with the cache on, in use.
func (lc *leaseCache) hold(lease *lock.Lease, opts lock.AcquireOptions) {
	lc.mu.Lock()
	if lc.closed {
		lc.mu.Unlock()
		return
	}
	if e := lc.entries[lease.Key]; e != nil {
		if e.lease.Err() == nil {
			lc.mu.Unlock()
			return // cannot happen while e lives: the key is ours once
		}
		lc.stopLocked(e)
	}
	lc.entries[lease.Key] = &cacheEntry{lease: lease, opts: opts, inUse: true}
	lc.mu.Unlock()
	lease.AfterEnd(func() { lc.drop(lease) })
	lease.AfterWanted(func() { lc.reclaim(lease) })
}

// put is Release's part: it keeps a lease the application releases, and
// reports whether it did (handled) and with which error. A lease that is
// wanted, ended, or may not be kept (the cache is closed or full, or the
// gateway does not push "wanted", so that nobody could reclaim it) is
// left to a real release.
func (lc *leaseCache) put(lease *lock.Lease, gatewayTells bool) (handled bool, err error) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	e := lc.entries[lease.Key]
	switch {
	case e == nil || e.lease != lease:
		return false, nil
	case !e.inUse:
		return true, fmt.Errorf("%w: %q (token %d) was released already; the client's lease cache keeps it until another caller wants it",
			lock.ErrNotHeld, lease.Key, lease.Token)
	case lc.closed || !gatewayTells || lease.Err() != nil || lease.IsWanted() || lc.unused >= lc.c.opts.MaxCachedLeases:
		delete(lc.entries, lease.Key)
		return false, nil
	}
	e.inUse = false
	lc.unused++
	lc.kept.Add(1)
	now := time.Now()
	e.idleAt = now.Add(lc.c.opts.CacheIdle)
	e.renewAt = time.Time{}
	if !e.opts.AutoRenew {
		e.renewAt = now.Add(lease.TTL() / 3)
	}
	lc.armLocked(e, now)
	return true, nil
}

// armLocked (re)starts e's timer for its next idle check or renewal.
func (lc *leaseCache) armLocked(e *cacheEntry, now time.Time) {
	at := e.idleAt
	if !e.renewAt.IsZero() && e.renewAt.Before(at) {
		at = e.renewAt
	}
	if e.timer == nil {
		e.timer = time.AfterFunc(at.Sub(now), func() { lc.tick(e) })
		return
	}
	e.timer.Reset(at.Sub(now))
}

// tick is e's timer: an unused lease idle for CacheIdle is released for
// real; one that the application did not ask to auto-renew is renewed at
// TTL/3 while it waits (a refused renewal ends it, and drop removes it).
func (lc *leaseCache) tick(e *cacheEntry) {
	lc.mu.Lock()
	if lc.entries[e.lease.Key] != e || e.inUse {
		lc.mu.Unlock()
		return // taken again, or gone, since the timer was set
	}
	now := time.Now()
	switch {
	case !now.Before(e.idleAt):
		lc.evictLocked(e, &lc.idle)
		return
	case !e.renewAt.IsZero() && !now.Before(e.renewAt):
		e.renewAt = now.Add(e.lease.TTL() / 3)
		go lc.renew(e.lease)
	}
	lc.armLocked(e, now)
	lc.mu.Unlock()
}

// renew renews an unused lease for the cache, as lock.KeepAlive would.
func (lc *leaseCache) renew(lease *lock.Lease) {
	ctx, cancel := context.WithDeadline(lc.c.ctx, lease.Deadline())
	defer cancel()
	err := lc.c.Renew(ctx, lease, 0)
	if errors.Is(err, lock.ErrNotHeld) {
		lease.End(err)
	}
}

// reclaim is the lease's AfterWanted callback: an unused lease is released
// for real at once; one in use is left to the application, which sees
// Wanted (and whose Release then releases it for real).
func (lc *leaseCache) reclaim(lease *lock.Lease) {
	lc.mu.Lock()
	e := lc.entries[lease.Key]
	if e == nil || e.lease != lease || e.inUse {
		lc.mu.Unlock()
		return
	}
	if lc.bugs.reclaimKeepsLease {
		lc.mu.Unlock()
		lc.reclaimed.Add(1)
		go lc.c.releaseQuietly(lease)
		return
	}
	lc.evictLocked(e, &lc.reclaimed)
}

// evictLocked removes the unused entry e, releases mu, and releases its
// lease for real in the background.
func (lc *leaseCache) evictLocked(e *cacheEntry, count *atomic.Uint64) {
	lc.stopLocked(e)
	delete(lc.entries, e.lease.Key)
	lc.mu.Unlock()
	count.Add(1)
	go lc.c.releaseQuietly(e.lease)
}

// drop is the lease's AfterEnd callback: an ended lease (a refused
// renewal, its deadline, a real release) leaves the cache and is never
// handed out.
func (lc *leaseCache) drop(lease *lock.Lease) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	if lc.bugs.reclaimKeepsLease {
		return
	}
	if e := lc.entries[lease.Key]; e != nil && e.lease == lease {
		lc.stopLocked(e)
		delete(lc.entries, lease.Key)
	}
}

// close stops caching and releases every unused lease for real, waiting
// for the releases within the client's RequestTimeout.
func (lc *leaseCache) close() {
	lc.mu.Lock()
	lc.closed = true
	var doomed []*lock.Lease
	for key, e := range lc.entries {
		if !e.inUse {
			lc.stopLocked(e)
			delete(lc.entries, key)
			doomed = append(doomed, e.lease)
		}
	}
	lc.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range doomed {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lc.c.releaseQuietly(l)
		}()
	}
	wg.Wait()
}

func (lc *leaseCache) stats() CacheStats {
	lc.mu.Lock()
	unused := lc.unused
	lc.mu.Unlock()
	return CacheStats{Hits: lc.hits.Load(), Misses: lc.misses.Load(), Kept: lc.kept.Load(),
		Reclaimed: lc.reclaimed.Load(), Idle: lc.idle.Load(), Unused: unused}
}

// CacheStats reports what the lease cache did; zero when the cache is off.
func (c *Client) CacheStats() CacheStats {
	if c.cache == nil {
		return CacheStats{}
	}
	return c.cache.stats()
}

// releaseQuietly releases a lease the cache gave up, bounded by
// RequestTimeout; a failure is logged (the lease then ends at its TTL).
func (c *Client) releaseQuietly(lease *lock.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	if err := c.release(ctx, lease); err != nil {
		c.log.Info("lockgate client: releasing a cached lease failed; it ends at its TTL", "key", lease.Key, "token", lease.Token, "err", err)
	}
}

// evict takes the unused leases of keys out of the cache, for the caller
// to release for real: an acquire of several keys (never served from the
// cache) would otherwise wait behind them.
func (lc *leaseCache) evict(keys []string) (stale []*lock.Lease) {
	lc.mu.Lock()
	defer lc.mu.Unlock()
	for _, k := range keys {
		e := lc.entries[k]
		if e == nil || e.inUse {
			continue
		}
		lc.stopLocked(e)
		delete(lc.entries, k)
		stale = append(stale, e.lease)
	}
	return stale
}
