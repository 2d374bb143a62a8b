package latency

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// quiet hides its Locker's SignalsWanted: a Locker that cannot tell a
// holder it is wanted.
type quiet struct{ lock.Locker }

// TestWantedWorkload runs the wanted workload on the in-memory reference
// Locker, which marks a holder wanted as a waiter queues: every cycle is a
// sample and nothing fails. On a Locker that does not signal wanted it
// returns errNoWanted at once instead of waiting for a signal that never
// comes.
func TestWantedWorkload(t *testing.T) {
	store := locktest.NewMemStore()
	conn := &provision.Conn{Backend: "mem"}
	for range 5 { // 2 pairs; the odd one out is not used
		conn.Clients = append(conn.Clients, store.NewLocker())
	}
	cfg := LatencyConfig{Clients: 5, TTL: 10 * time.Second}
	r := &Run{hist: report.NewHist()}
	rr, err := runWanted(context.Background(), conn, cfg, 300*time.Millisecond, r)
	if err != nil {
		t.Fatal(err)
	}
	if rr.ops < 10 || r.Errors != 0 || r.hist.TotalCount() != rr.ops || rr.pct.P50 <= 0 {
		t.Errorf("ops %d, errors %d %v, samples %d, p50 %.0f µs", rr.ops, r.Errors, r.ErrorKinds, r.hist.TotalCount(), rr.pct.P50)
	}

	for i, l := range conn.Clients {
		conn.Clients[i] = quiet{l}
	}
	start := time.Now()
	_, err = runWanted(context.Background(), conn, cfg, time.Minute, &Run{hist: report.NewHist()})
	if !errors.Is(err, errNoWanted) || time.Since(start) > 5*time.Second {
		t.Errorf("a Locker without the signal: %v after %v; want errNoWanted at once", err, time.Since(start))
	}
}

// TestAffinityPicker checks the affinity workload's choice of keys: a
// client's own keys are its alone, and the shared pool's share of the
// cycles is Shared.
func TestAffinityPicker(t *testing.T) {
	a := &AffinityConfig{Keys: 8, SharedKeys: 4, Shared: 0.05}
	shared := []string{"p/shared/0", "p/shared/1", "p/shared/2", "p/shared/3"}
	const n = 100_000
	seen := map[string]int{}
	sharedN := 0
	pick := a.picker("p", 3, shared)
	for range n {
		k := pick()
		seen[k]++
		if strings.HasPrefix(k, "p/shared/") {
			sharedN++
		} else if !strings.HasPrefix(k, "p/3/") {
			t.Fatalf("client 3 picked %q, another client's key", k)
		}
	}
	if len(seen) != 12 {
		t.Errorf("%d distinct keys, want 8 own and 4 shared: %v", len(seen), seen)
	}
	if got := float64(sharedN) / n; got < 0.045 || got > 0.055 {
		t.Errorf("shared fraction %.4f, want 0.05", got)
	}
	for _, bad := range []AffinityConfig{{Keys: 0, SharedKeys: 4, Shared: 0.05}, {Keys: 8, SharedKeys: 0, Shared: 0.05}, {Keys: 8, SharedKeys: 4, Shared: 1.5}} {
		if err := bad.validate(); err == nil {
			t.Errorf("%+v: valid; want an error", bad)
		}
	}
	if err := (&AffinityConfig{Keys: 8, Shared: 0}).validate(); err != nil {
		t.Errorf("no shared keys at 0 %% shared: %v", err)
	}
}

// TestCacheComparison checks the cache-on ÷ cache-off ratios on a report
// with known figures.
func TestCacheComparison(t *testing.T) {
	run := func(cache string, ops int64, p50, p99 float64, misses uint64) *Run {
		r := &Run{Backend: provision.Raft, Via: provision.Gateway, Workload: Affinity, Cache: cache, Ops: ops, OpsPerSec: float64(ops),
			LatencyUS: report.Percentiles{P50: p50, P99: p99}, rounds: []roundResult{{ops: ops, elapsed: time.Second}}}
		if cache == CacheOn {
			r.CacheStats = &CacheStats{Hits: uint64(ops) - misses, Misses: misses, Reclaimed: 7}
		}
		return r
	}
	rep := &Report{Runs: []*Run{run(CacheOff, 1000, 800, 4000, 0), run(CacheOn, 25000, 2, 2000, 500)}}
	rep.compareCache()
	if len(rep.CacheComparisons) != 1 {
		t.Fatalf("%d comparisons, want 1", len(rep.CacheComparisons))
	}
	c := rep.CacheComparisons[0]
	if c.OpsRatio != 25 || c.P50Ratio != 400 || c.P99Ratio != 2 || c.GrantsRatio != 0.5 || c.Stats.Reclaimed != 7 {
		t.Errorf("comparison %+v; want ops 25, p50 400, p99 2, grants 0.5, 7 reclaimed", c)
	}
	var b strings.Builder
	if err := rep.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), fmt.Sprintf("%.2f", 25.0)) {
		t.Errorf("the table has no ops ratio:\n%s", b.String())
	}
}
