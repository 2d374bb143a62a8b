package campaign

import (
	"context"
	"errors"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// staleReads answers every third Inspect from a view of the key at least
// 100 ms old (a lagging replica's), the others from the lock itself.
type staleReads struct {
	*locktest.MemLocker
	n    *atomic.Uint64
	mu   *sync.Mutex
	seen map[string][]answer // every honest answer so far, by key
	// phantom: the stale answers show a token nobody was granted instead.
	phantom bool
}

type answer struct {
	at   time.Time
	info *lock.LockInfo // nil: free
}

func (s *staleReads) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	info, err := s.MemLocker.Inspect(ctx, key)
	if err != nil && !isNotFound(err) {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seen[key] = append(s.seen[key], answer{time.Now(), info})
	if s.n.Add(1)%3 == 0 {
		if s.phantom && info != nil {
			return &lock.LockInfo{Key: key, Token: info.Token + 1<<40}, nil
		}
		var old *answer
		for i := range s.seen[key] {
			if time.Since(s.seen[key][i].at) >= 100*time.Millisecond {
				old = &s.seen[key][i]
			}
		}
		if old != nil && !s.phantom {
			if old.info == nil {
				return nil, lock.ErrNotFound
			}
			return old.info, nil
		}
	}
	return info, err
}

func isNotFound(err error) bool { return err != nil && errors.Is(err, lock.ErrNotFound) }

// TestChaosStaleReadCaught: the campaign's clients read, and a read that
// answers from a stale view (an old holder, or free while the key is
// held) is caught by the linearizability check, a read of a token no
// acquire was granted by the reads check; the honest lock passes with
// reads in its history.
func TestChaosStaleReadCaught(t *testing.T) {
	// Pauses between a release and the next acquire leave the key free
	// now and then.
	cfg := ChaosConfig{Think: 50 * time.Millisecond}
	rep := memCampaign(t, cfg, nil)
	if rep.Reads < 10 || !rep.Linearizable || len(rep.Failures()) != 0 || rep.UnexplainedReads != 0 {
		t.Errorf("honest reads: %d reads, %q", rep.Reads, rep.Verdicts())
	}
	if n := countReads(rep.history); n.free == 0 || n.held == 0 {
		t.Errorf("reads saw %d free and %d held: want both", n.free, n.held)
	}
	for _, phantom := range []bool{false, true} {
		var n atomic.Uint64
		var mu sync.Mutex
		seen := map[string][]answer{}
		rep = memCampaign(t, cfg, func(m *locktest.MemLocker) lock.Locker {
			return &staleReads{MemLocker: m, n: &n, mu: &mu, seen: seen, phantom: phantom}
		})
		switch {
		case phantom:
			if rep.UnexplainedReads == 0 || !slices.ContainsFunc(rep.Failures(), startsWith("reads:")) {
				t.Errorf("reads of tokens nobody was granted: %q", rep.Verdicts())
			}
		default:
			if rep.Linearizable || rep.Linearizability != "Illegal" || !slices.ContainsFunc(rep.Failures(), startsWith("linearizable:")) {
				t.Errorf("stale reads: %q", rep.Verdicts())
			}
		}
	}
}

type readCounts struct{ free, held int }

func countReads(h check.History) readCounts {
	var n readCounts
	for _, o := range h {
		if o.Kind == check.Read && o.OK {
			if len(o.Holders) == 0 {
				n.free++
			} else {
				n.held++
			}
		}
	}
	return n
}

// cachingLocker is a lease cache in front of a MemLocker, as the SDK's
// works: Release keeps a lease, still held, and the next Acquire of its
// key returns it while at least half its TTL is left; a kept lease is
// released for real a little later (the SDK's reclaim or idle eviction,
// shortened). With serveReleased it serves a kept lease again after
// releasing it for real (the defect client/cache_seed_test.go's broken
// cache has).
type cachingLocker struct {
	*locktest.MemLocker
	serveReleased bool
	mu            sync.Mutex
	kept          map[string]*lock.Lease
	wg            *sync.WaitGroup
}

func (c *cachingLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	c.mu.Lock()
	if l := c.kept[key]; l != nil {
		delete(c.kept, key)
		if c.serveReleased || l.Err() == nil && time.Until(l.Deadline()) > l.TTL()/2 {
			c.mu.Unlock()
			return l, nil
		}
		c.mu.Unlock()
		c.MemLocker.Release(ctx, l) // it cannot serve: let it go first
		return c.MemLocker.Acquire(ctx, key, opts)
	}
	c.mu.Unlock()
	return c.MemLocker.Acquire(ctx, key, opts)
}

func (c *cachingLocker) Release(ctx context.Context, lease *lock.Lease) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if lease.Err() != nil {
		return c.MemLocker.Release(ctx, lease)
	}
	c.kept[lease.Key] = lease
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		time.Sleep(30 * time.Millisecond) // the cache's idle time, shortened
		c.mu.Lock()
		if c.kept[lease.Key] != lease {
			c.mu.Unlock()
			return // served again
		}
		if !c.serveReleased {
			delete(c.kept, lease.Key)
		}
		c.mu.Unlock()
		c.MemLocker.Release(context.Background(), lease)
	}()
	return nil
}

// TestChaosCachedLeases: half the clients cache their leases; the
// campaign records a kept release when the lease's Done closes and a
// cache hit as the same hold, and the honest cache passes every checker
// with hits counted; a cache that serves a lease it released for real is
// caught.
func TestChaosCachedLeases(t *testing.T) {
	for _, broken := range []bool{false, true} {
		var wg sync.WaitGroup
		opened := 0 // the campaign opens its clients in order; the last half cache
		rep := memCampaign(t, ChaosConfig{CacheShare: 0.5, Think: 20 * time.Millisecond}, func(m *locktest.MemLocker) lock.Locker {
			if opened++; opened <= 2 {
				return m
			}
			return &cachingLocker{MemLocker: m, serveReleased: broken, kept: map[string]*lock.Lease{}, wg: &wg}
		})
		wg.Wait()
		if rep.CachedClients != 2 || rep.CacheKept == 0 || rep.CacheHits == 0 {
			t.Errorf("broken %v: %d cached clients, %d kept, %d hits", broken, rep.CachedClients, rep.CacheKept, rep.CacheHits)
		}
		switch {
		case broken:
			if len(rep.Failures()) == 0 {
				t.Errorf("a cache that serves released leases passed: %q", rep.Verdicts())
			}
		case len(rep.Failures()) != 0 || rep.Overlaps != 0 || !rep.Linearizable:
			t.Errorf("honest cache: %q %q", rep.Verdicts(), rep.TokenExamples)
		}
	}
}
