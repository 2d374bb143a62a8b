package client_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/lock"
)

// netSwitch is the seed's disconnect emulation on the client's side: Cut
// drops every connection the client has and refuses new ones (the network
// between the client and the servers is gone) until Restore.
type netSwitch struct {
	mu    sync.Mutex
	cut   bool
	conns map[net.Conn]struct{}
	cuts  atomic.Int64
}

func (s *netSwitch) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cut {
		return nil, fmt.Errorf("dial %s: the test cut this client off", addr)
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	if s.conns == nil {
		s.conns = map[net.Conn]struct{}{}
	}
	s.conns[c] = struct{}{}
	return c, nil
}

func (s *netSwitch) Cut() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.cut = true
	s.cuts.Add(1)
	for c := range s.conns {
		c.Close()
	}
	s.conns = nil
}

func (s *netSwitch) Restore() {
	s.mu.Lock()
	s.cut = false
	s.mu.Unlock()
}

// TestCacheSeedCounters is the lease-cache design's own check, in its
// spirit: clients with their lease caches on increment per-key counters in
// the fenced store under the lock — mostly keys of their own, sometimes
// keys they share — while their connections are dropped and restored and
// the raftlock leader is stopped twice (five nodes). At the end every
// counter equals the increments the store acknowledged, no two holds of a
// key overlapped (uses of one cached grant count as one hold), and every
// accepted write carried the key's highest token.
func TestCacheSeedCounters(t *testing.T) {
	if testing.Short() {
		t.Skip("a 5-node cluster with failovers and disconnects")
	}
	r := runSeedCounters(t, seedRun{nodes: 5, run: 12 * time.Second, leaderStops: 2, pShared: 0.2})
	for _, m := range r.mismatches {
		t.Error(m)
	}
	for _, x := range r.violations[:min(len(r.violations), 10)] {
		t.Error(x)
	}
	if len(r.violations) > 0 {
		t.Fatalf("%d violations of mutual exclusion or fencing", len(r.violations))
	}
	if r.badWrites > 0 {
		t.Errorf("%d writes accepted with a token below the key's highest", r.badWrites)
	}
	if r.increments == 0 || r.stats.Hits == 0 || r.stats.Reclaimed == 0 {
		t.Errorf("the run exercised too little: %d increments, %d cache hits, %d reclaims", r.increments, r.stats.Hits, r.stats.Reclaimed)
	}
}

// TestCacheSeedCountersCatchesBrokenCache: the same check fails on a cache
// that keeps serving a reclaimed lease during and after its release (the
// next holder is granted as soon as that release commits).
func TestCacheSeedCountersCatchesBrokenCache(t *testing.T) {
	if testing.Short() {
		t.Skip("a 3-node cluster under load")
	}
	r := runSeedCounters(t, seedRun{nodes: 3, run: 6 * time.Second, broken: true, pShared: 0.2})
	if len(r.violations) == 0 && len(r.mismatches) == 0 {
		t.Fatalf("the counter check passed a broken cache: %d increments, %d reclaims, no overlap, every counter right",
			r.increments, r.stats.Reclaimed)
	}
	t.Logf("caught: %d violations, %d counter mismatches (first: %v)", len(r.violations), len(r.mismatches),
		append(r.mismatches, fmt.Sprint(r.violations))[0])
}

// seedRun configures runSeedCounters.
type seedRun struct {
	nodes       int
	run         time.Duration
	leaderStops int     // leaders stopped, evenly over the run
	broken      bool    // every client's cache gets client.BreakCacheReclaim
	pShared     float64 // the share of cycles on a shared key
}

// seedResult is what runSeedCounters found.
type seedResult struct {
	violations []check.Violation
	mismatches []string // counters that differ from their acknowledged increments
	badWrites  int64
	increments int64
	stats      client.CacheStats // summed over the clients
}

func runSeedCounters(t *testing.T, cfg seedRun) seedResult {
	const (
		nClients = 6
		shared   = 2 // keys every client takes now and then
		ttl      = 2 * time.Second
		margin   = 500 * time.Millisecond // a holder starts a write only with this much of its lease left
	)
	run := cfg.run
	cluster := startRaftN(t, cfg.nodes)
	raftLeader(t, cluster)
	store, err := fencedstore.Open(filepath.Join(t.TempDir(), "fenced.log"), fencedstore.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })

	type clientState struct {
		c   *client.Client
		sw  *netSwitch
		own string
	}
	clients := make([]clientState, nClients)
	for i := range clients {
		sw := &netSwitch{}
		clients[i] = clientState{
			c:   newClient(t, apiAddrs(cluster), client.Options{CacheLeases: true, NetDial: sw.dial, RequestTimeout: 3 * time.Second}),
			sw:  sw,
			own: fmt.Sprintf("seed/own/%d", i),
		}
		if cfg.broken {
			client.BreakCacheReclaim(clients[i].c)
		}
	}
	keyOf := func(i int) string {
		if rand.Float64() < cfg.pShared {
			return fmt.Sprintf("seed/shared/%d", rand.IntN(shared))
		}
		return clients[i].own
	}

	var (
		acked    sync.Map // key → *atomic.Int64: increments the store accepted
		rec      check.Recorder
		badWrite atomic.Int64
		cycles   atomic.Int64
	)
	ctx, stop := context.WithTimeout(context.Background(), run)
	defer stop()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cs := clients[i]
			name := fmt.Sprintf("client-%d", i)
			// Uses of one grant (one token) merge into one hold: a cached
			// lease is held on the server from its grant to its real release.
			type use struct {
				start, end time.Time
				token      lock.Token
				key        string
			}
			open := map[lock.Token]*use{}
			defer func() {
				for _, u := range open {
					rec.Add(check.Hold{Key: u.key, Holder: name, Token: u.token, Start: u.start, End: u.end})
				}
			}()
			for ctx.Err() == nil {
				key := keyOf(i)
				actx, cancel := context.WithTimeout(ctx, 4*time.Second)
				lease, err := cs.c.Acquire(actx, key, lock.AcquireOptions{TTL: ttl, AutoRenew: true})
				cancel()
				if err != nil {
					continue // a failover, a cut, or the end of the run
				}
				start := time.Now()
				if lease.Err() == nil && time.Until(lease.Deadline()) > margin {
					n := 0
					if r, ok := store.Read(key); ok {
						n, _ = strconv.Atoi(r.Data)
					}
					if time.Until(lease.Deadline()) > margin/2 {
						res, err := store.Write(context.Background(), fencedstore.WriteRequest{ClientID: name,
							Token: fencedstore.FencingToken{Key: key, Value: uint64(lease.Token)}, Data: strconv.Itoa(n + 1)})
						switch {
						case err == nil:
							v, _ := acked.LoadOrStore(key, new(atomic.Int64))
							v.(*atomic.Int64).Add(1)
							if res.Previous > uint64(lease.Token) {
								badWrite.Add(1)
							}
						case errors.Is(err, fencedstore.ErrStaleToken):
							// refused, not acknowledged: the counter is unchanged
						default:
							t.Errorf("store write: %v", err)
						}
					}
				}
				end := time.Now()
				if d := lease.Deadline(); end.After(d) {
					end = d
				}
				if u := open[lease.Token]; u != nil && u.key == key {
					u.end = end
				} else {
					open[lease.Token] = &use{start: start, end: end, token: lease.Token, key: key}
				}
				rctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
				cs.c.Release(rctx, lease) // a failed release leaves the lease to its TTL
				cancel()
				cycles.Add(1)
			}
		}()
	}

	// The faults: disconnects of random clients, longer than the TTL now
	// and then, and two leader stops.
	wg.Add(1)
	go func() {
		defer wg.Done()
		var stopsAt []time.Duration
		for k := 1; k <= cfg.leaderStops; k++ {
			stopsAt = append(stopsAt, time.Duration(k)*run/time.Duration(cfg.leaderStops+1))
		}
		began := time.Now()
		for ctx.Err() == nil {
			if len(stopsAt) > 0 && time.Since(began) > stopsAt[0] {
				stopsAt = stopsAt[1:]
				lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
				if l, err := cluster.Leader(lctx); err == nil {
					t.Logf("stopping leader %s", l.ID())
					l.Shutdown()
				}
				cancel()
			}
			cs := clients[rand.IntN(nClients)]
			cs.sw.Cut()
			d := time.Duration(200+rand.IntN(2800)) * time.Millisecond
			select {
			case <-time.After(d):
			case <-ctx.Done():
			}
			cs.sw.Restore()
			select {
			case <-time.After(time.Duration(100+rand.IntN(400)) * time.Millisecond):
			case <-ctx.Done():
			}
		}
	}()
	wg.Wait()

	var res seedResult
	for _, cs := range clients {
		s := cs.c.CacheStats()
		res.stats.Hits += s.Hits
		res.stats.Misses += s.Misses
		res.stats.Reclaimed += s.Reclaimed
	}
	cuts := int64(0)
	for _, cs := range clients {
		cuts += cs.sw.cuts.Load()
	}
	acked.Range(func(k, v any) bool {
		key, want := k.(string), v.(*atomic.Int64).Load()
		res.increments += want
		r, ok := store.Read(key)
		got, _ := strconv.Atoi(r.Data)
		if !ok || int64(got) != want {
			res.mismatches = append(res.mismatches, fmt.Sprintf("counter %q = %d (found %v), but the store acknowledged %d increments", key, got, ok, want))
		}
		return true
	})
	st := store.Stats()
	t.Logf("%d cycles, %d increments acknowledged, %d refused as stale; cache: %d hits, %d misses, %d reclaimed; %d disconnects",
		cycles.Load(), res.increments, st.Rejected, res.stats.Hits, res.stats.Misses, res.stats.Reclaimed, cuts)
	res.violations = check.CheckHistory(rec.Holds())
	res.badWrites = badWrite.Load()
	return res
}
