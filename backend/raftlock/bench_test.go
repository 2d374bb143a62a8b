package raftlock

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// The benchmarks share one three-node durable cluster, started on first use
// and stopped by TestMain, so that the floor and the lock benchmarks are
// measured on the same setup in the same run and their ratios hold on a
// noisy machine. Run: go test -run '^$' -bench . -benchtime 3s ./backend/raftlock/

var (
	benchOnce    sync.Once
	benchCluster *LocalCluster
	benchErr     error
	benchDir     string
)

func TestMain(m *testing.M) {
	code := m.Run()
	if benchCluster != nil {
		benchCluster.Shutdown()
		os.RemoveAll(benchDir)
	}
	os.Exit(code)
}

func quietConfig(c *Config) {
	c.RaftAddr = "127.0.0.1:0"
	c.APIAddr = "127.0.0.1:0"
	c.CommitTimeout = 5 * time.Millisecond // the production defaults otherwise
	c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
}

func benchLeader(b *testing.B) *Node {
	b.Helper()
	benchOnce.Do(func() {
		benchDir, benchErr = os.MkdirTemp("", "raftlock-bench-")
		if benchErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		benchCluster, benchErr = StartLocalCluster(ctx, 3, benchDir, quietConfig)
	})
	if benchErr != nil {
		b.Fatal(benchErr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	l, err := benchCluster.Leader(ctx)
	if err != nil {
		b.Fatal(err)
	}
	return l
}

// p50 returns the median of samples.
func p50(samples []time.Duration) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	slices.Sort(samples)
	return samples[len(samples)/2]
}

// BenchmarkApplyFloor is raw hashicorp/raft Apply of an empty entry on the
// same cluster: the floor that the lock operations are measured against.
func BenchmarkApplyFloor(b *testing.B) {
	l := benchLeader(b)
	noop := fsm.Encode(fsm.Entry{})
	b.Run("clients=1", func(b *testing.B) {
		samples := make([]time.Duration, 0, b.N)
		for b.Loop() {
			start := time.Now()
			if err := l.raft.Apply(noop, 10*time.Second).Error(); err != nil {
				b.Fatal(err)
			}
			samples = append(samples, time.Since(start))
		}
		b.ReportMetric(float64(p50(samples).Microseconds()), "p50-µs")
	})
	b.Run("appliers=64", func(b *testing.B) {
		var next atomic.Int64
		start := time.Now()
		var wg sync.WaitGroup
		for range 64 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for next.Add(1) <= int64(b.N) {
					if err := l.raft.Apply(noop, 10*time.Second).Error(); err != nil {
						b.Error(err)
						return
					}
				}
			}()
		}
		wg.Wait()
		b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "applies/s")
	})
}

// floorRun applies n empty entries from `appliers` goroutines and returns
// the Applies/s and the median latency of one Apply.
func floorRun(tb testing.TB, l *Node, n, appliers int) (rate float64, median time.Duration) {
	noop := fsm.Encode(fsm.Entry{})
	var next atomic.Int64
	var mu sync.Mutex
	var samples []time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	for range appliers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for next.Add(1) <= int64(n) {
				t := time.Now()
				if err := l.raft.Apply(noop, 10*time.Second).Error(); err != nil {
					tb.Error(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), p50(samples)
}

// clientsRun runs n acquire+release cycles from `clients` goroutines, each
// on its own key or all on one, and returns the cycles/s and the median
// cycle.
func clientsRun(tb testing.TB, l *Node, n, clients int, sameKey bool) (rate float64, median time.Duration) {
	return cyclesRun(tb, l, n, clients, func(c, _ int) (string, lock.AcquireOptions) {
		key := fmt.Sprintf("bench-%d", c)
		if sameKey {
			key = "bench-contended"
		}
		return key, lock.AcquireOptions{TTL: time.Minute}
	})
}

// cyclesRun runs n acquire+release cycles from `clients` goroutines, each
// with its own session; cycle gives the key and options of client c's
// cycle i (i counts up from c). It returns the cycles/s and the median
// cycle.
func cyclesRun(tb testing.TB, l *Node, n, clients int, cycle func(c, i int) (string, lock.AcquireOptions)) (rate float64, median time.Duration) {
	ctx := context.Background()
	var next atomic.Int64
	var mu sync.Mutex
	var samples []time.Duration
	start := time.Now()
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := l.NewSession()
			defer s.Close()
			var mine []time.Duration
			for i := c; next.Add(1) <= int64(n); i++ {
				key, opts := cycle(c, i)
				t := time.Now()
				lease, err := s.Acquire(ctx, key, opts)
				if err != nil {
					tb.Error(err)
					return
				}
				if err := s.Release(ctx, lease); err != nil {
					tb.Error(err)
					return
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			samples = append(samples, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(n) / time.Since(start).Seconds(), p50(samples)
}

// interleave runs the measured workload and its floor in alternating rounds
// (A B A B …) so that the machine's drift hits both alike, and returns the
// totals of each.
func interleave(b *testing.B, rounds int, work, floor func(n int) (float64, time.Duration)) (workRate, floorRate float64, workP50, floorP50 time.Duration) {
	var wr, fr []float64
	var wp, fp []time.Duration
	per := max(b.N/rounds, 1)
	for range rounds {
		r, p := work(per)
		wr, wp = append(wr, r), append(wp, p)
		r, p = floor(per)
		fr, fp = append(fr, r), append(fp, p)
	}
	slices.Sort(wr)
	slices.Sort(fr)
	return wr[len(wr)/2], fr[len(fr)/2], p50(wp), p50(fp)
}

// BenchmarkCycle is sequential acquire+release of one key by one client:
// two commits. Goal: ≤ 2.3× the floor's single-Apply latency, measured in
// interleaved rounds.
func BenchmarkCycle(b *testing.B) {
	l := benchLeader(b)
	_, _, cycle, floor := interleave(b, 5,
		func(n int) (float64, time.Duration) { return clientsRun(b, l, n, 1, true) },
		func(n int) (float64, time.Duration) { return floorRun(b, l, n, 1) })
	b.ReportMetric(float64(cycle.Microseconds()), "p50-µs")
	b.ReportMetric(float64(cycle)/float64(floor), "x-floor-apply")
}

// BenchmarkCycleParallel is 32 clients each cycling its own key. Goal: ≥
// 0.4× the floor's 64-applier throughput, in cycles/s, measured in
// interleaved rounds.
func BenchmarkCycleParallel(b *testing.B) {
	l := benchLeader(b)
	cycles, applies, _, _ := interleave(b, 5,
		func(n int) (float64, time.Duration) { return clientsRun(b, l, n, 32, false) },
		func(n int) (float64, time.Duration) { return floorRun(b, l, 2*n, 64) })
	b.ReportMetric(cycles, "cycles/s")
	b.ReportMetric(cycles/applies, "x-floor-throughput")
}

// BenchmarkHandoff is 32 clients contending one key; one op is one handoff
// (a release and the grant of the next waiter). Goal: ≤ 1.5 floor commits
// per handoff, against the single-Apply latency of interleaved rounds.
func BenchmarkHandoff(b *testing.B) {
	l := benchLeader(b)
	handoffs, _, _, floor := interleave(b, 5,
		func(n int) (float64, time.Duration) { return clientsRun(b, l, n, 32, true) },
		func(n int) (float64, time.Duration) { return floorRun(b, l, min(n, 500), 1) })
	b.ReportMetric(handoffs, "handoffs/s")
	b.ReportMetric(float64(time.Second)/handoffs/float64(floor), "floor-commits/handoff")
}

// BenchmarkHeldLocks holds 100k locks on a one-node cluster and reports the
// leader's heap per held lock (state machine, expiry tracking, Raft), and the
// time to snapshot and restore them.
func BenchmarkHeldLocks(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		c, err := StartLocalCluster(ctx, 1, b.TempDir(), quietConfig)
		if err != nil {
			b.Fatal(err)
		}
		l := leader(b, c)
		before := heapInUse()
		holdMany(b, l, n, time.Hour)
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "bytes/lock")

		start := time.Now()
		f := l.raft.Snapshot()
		if err := f.Error(); err != nil {
			b.Fatal(err)
		}
		_, rc, err := f.Open()
		if err != nil {
			b.Fatal(err)
		}
		restored := fsm.New()
		if err := restored.Restore(rc); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "snapshot+restore-ms")
		if restored.NumLocks() != n {
			b.Fatalf("restored %d locks, want %d", restored.NumLocks(), n)
		}
		c.Shutdown()
		cancel()
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// holdMany grants n locks on the leader, 1000 per entry, with keys of about
// 20 bytes, owners of 16 and 128-bit handles, as real clients would.
func holdMany(tb testing.TB, l *Node, n int, ttl time.Duration) {
	tb.Helper()
	const batch = 1000
	for i := 0; i < n; i += batch {
		e := fsm.Entry{}
		for j := i; j < min(i+batch, n); j++ {
			e.Ops = append(e.Ops, fsm.Op{Type: fsm.OpAcquire, Key: fmt.Sprintf("held/key-%012d", j),
				Owner: fmt.Sprintf("client-%09d", j%1000), Handle: lock.NewHandle(), TTL: ttl})
		}
		res, err := l.apply(e, time.Minute)
		if err != nil {
			tb.Fatal(err)
		}
		for _, r := range res.Results {
			if r.Status != fsm.StatusOK {
				tb.Fatalf("holdMany: status %v", r.Status)
			}
		}
	}
}

// rwRun runs n acquire+release cycles of one key from `clients`
// goroutines, each cycle shared with probability sharedPct/100 (by a
// fixed pattern per client), and returns the cycles/s.
func rwRun(tb testing.TB, l *Node, n, clients, sharedPct int) (rate float64, median time.Duration) {
	return cyclesRun(tb, l, n, clients, func(_, i int) (string, lock.AcquireOptions) {
		o := lock.AcquireOptions{TTL: time.Minute}
		if i%100 < sharedPct {
			o.Mode = lock.ModeShared
		}
		return "bench-rw", o
	})
}

// BenchmarkAcquireRW is 32 clients on one key, 90 % of the acquires
// shared, against the same with every acquire exclusive, in interleaved
// rounds. Goal: ≥ 5× the exclusive acquisitions/s.
func BenchmarkAcquireRW(b *testing.B) {
	l := benchLeader(b)
	rw, excl, _, _ := interleave(b, 5,
		func(n int) (float64, time.Duration) { return rwRun(b, l, n, 32, 90) },
		func(n int) (float64, time.Duration) { return rwRun(b, l, n, 32, 0) })
	b.ReportMetric(rw, "acq/s")
	b.ReportMetric(excl, "excl-acq/s")
	b.ReportMetric(rw/excl, "x-exclusive")
}

// multiRun runs n acquires of `keys` keys (AcquireAll when keys > 1), one
// client, each followed by a release, and returns the acquires' median.
func multiRun(tb testing.TB, l *Node, n, keys int) (rate float64, median time.Duration) {
	ctx := context.Background()
	s := l.NewSession()
	defer s.Close()
	ks := make([]string, keys)
	for i := range ks {
		ks[i] = fmt.Sprintf("bench-multi-%d-%d", keys, i)
	}
	samples := make([]time.Duration, 0, n)
	start := time.Now()
	for range n {
		t := time.Now()
		var leases []*lock.Lease
		var err error
		if keys == 1 {
			var lease *lock.Lease
			lease, err = s.Acquire(ctx, ks[0], lock.AcquireOptions{TTL: time.Minute})
			leases = []*lock.Lease{lease}
		} else {
			leases, err = s.AcquireAll(ctx, ks, lock.AcquireOptions{TTL: time.Minute})
		}
		if err != nil {
			tb.Error(err)
			return 0, 0
		}
		samples = append(samples, time.Since(t))
		if err := s.ReleaseAll(ctx, leases); err != nil {
			tb.Error(err)
			return 0, 0
		}
	}
	return float64(n) / time.Since(start).Seconds(), p50(samples)
}

// BenchmarkAcquireAll8 is AcquireAll of 8 keys against a single-key
// Acquire, one client, in interleaved rounds. Goal: ≤ 1.3× the
// single acquire's median latency.
func BenchmarkAcquireAll8(b *testing.B) {
	l := benchLeader(b)
	_, _, all, one := interleave(b, 5,
		func(n int) (float64, time.Duration) { return multiRun(b, l, n, 8) },
		func(n int) (float64, time.Duration) { return multiRun(b, l, n, 1) })
	b.ReportMetric(float64(all.Microseconds()), "p50-µs")
	b.ReportMetric(float64(one.Microseconds()), "single-p50-µs")
	b.ReportMetric(float64(all)/float64(one), "x-single")
}

// BenchmarkHeldSessionLeases is BenchmarkHeldLocks for leases in sessions
// (LOCKGATE_BENCH_LEASES of them, default 100k, in 1 per 1000 sessions):
// heap per lease on the leader's state machine, snapshot, restore, and
// the takeover entry (OpExtendAll, one per leader change).
func BenchmarkHeldSessionLeases(b *testing.B) {
	n := 100_000
	if v, err := strconv.Atoi(os.Getenv("LOCKGATE_BENCH_LEASES")); err == nil && v > 0 {
		n = v
	}
	sessions := max(1, n/1000)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		c, err := StartLocalCluster(ctx, 1, b.TempDir(), quietConfig)
		if err != nil {
			b.Fatal(err)
		}
		l := leader(b, c)
		before := heapInUse()
		e := fsm.Entry{}
		for s := range sessions {
			e.Ops = append(e.Ops, fsm.Op{Type: fsm.OpSessionOpen, Key: fmt.Sprintf("%032x", s+1), Owner: fmt.Sprintf("client-%09d", s), TTL: time.Hour})
		}
		if _, err := l.apply(e, time.Minute); err != nil {
			b.Fatal(err)
		}
		const batch = 1000
		for i := 0; i < n; i += batch {
			e := fsm.Entry{}
			for j := i; j < min(i+batch, n); j++ {
				e.Ops = append(e.Ops, fsm.Op{Type: fsm.OpAcquire, Key: fmt.Sprintf("held/key-%012d", j),
					Owner: fmt.Sprintf("client-%09d", j%sessions), Handle: lock.NewHandle(), TTL: time.Hour, Session: fmt.Sprintf("%032x", j%sessions+1)})
			}
			if _, err := l.apply(e, time.Minute); err != nil {
				b.Fatal(err)
			}
		}
		after := heapInUse()
		if l.fsm.NumLocks() != n {
			b.Fatalf("%d locks held, want %d", l.fsm.NumLocks(), n)
		}
		b.ReportMetric(float64(after-before)/float64(n), "bytes/lease")

		start := time.Now()
		if _, err := l.apply(fsm.Entry{Ops: []fsm.Op{{Type: fsm.OpExtendAll}}}, time.Minute); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "extend-all-ms")

		start = time.Now()
		f := l.raft.Snapshot()
		if err := f.Error(); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "snapshot-ms")
		_, rc, err := f.Open()
		if err != nil {
			b.Fatal(err)
		}
		start = time.Now()
		restored := fsm.New()
		if err := restored.Restore(rc); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(time.Since(start).Milliseconds()), "restore-ms")
		if restored.NumLocks() != n || restored.NumSessions() != sessions {
			b.Fatalf("restored %d locks in %d sessions, want %d in %d", restored.NumLocks(), restored.NumSessions(), n, sessions)
		}
		c.Shutdown()
		cancel()
	}
}

// BenchmarkSessionLeaseHeap holds LOCKGATE_BENCH_LEASES session leases
// (default 200k, in 1 session per 200 leases, at least one) through the
// path the gateway takes — Session.OpenSession, then Session.Acquire with
// AcquireOptions.Session from 64 callers at once — on a one-node cluster,
// and reports the leader's live heap per lease after a collection: the
// state machine, the scheduler, the lock.Lease handed out and its session's
// set ("leader-B/lease"), and with a table of the leases by handle and an
// end callback each, as a gateway connection keeps them ("with-table-B/lease").
// LOCKGATE_BENCH_HEAPPROF=FILE writes the heap profile of the held leases.
func BenchmarkSessionLeaseHeap(b *testing.B) {
	n := 200_000
	if v, err := strconv.Atoi(os.Getenv("LOCKGATE_BENCH_LEASES")); err == nil && v > 0 {
		n = v
	}
	sessions := max(1, n/200)
	for b.Loop() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		c, err := StartLocalCluster(ctx, 1, b.TempDir(), func(c *Config) {
			quietConfig(c)
			c.MaxSessions = max(c.MaxSessions, sessions)
		})
		if err != nil {
			b.Fatal(err)
		}
		l := leader(b, c)
		sl := l.NewSession()
		ss := make([]*lock.Session, sessions)
		for i := range ss {
			if ss[i], err = sl.OpenSession(ctx, lock.SessionOptions{TTL: time.Hour, Owner: fmt.Sprintf("client-%09d", i)}); err != nil {
				b.Fatal(err)
			}
		}
		leases := make([]*lock.Lease, n)
		before := heapInUse()
		const callers = 64
		var wg sync.WaitGroup
		for g := range callers {
			wg.Go(func() {
				for i := g; i < n; i += callers {
					lease, err := sl.Acquire(ctx, fmt.Sprintf("held/key-%012d", i), lock.AcquireOptions{Session: ss[i%sessions]})
					if err != nil {
						b.Error(err)
						return
					}
					leases[i] = lease
				}
			})
		}
		wg.Wait()
		if b.Failed() {
			b.FailNow()
		}
		held := heapInUse()
		if f := os.Getenv("LOCKGATE_BENCH_HEAPPROF"); f != "" {
			w, _ := os.Create(f)
			pprof.Lookup("heap").WriteTo(w, 0)
			w.Close()
		}
		var mu sync.Mutex
		table := make(map[string]*lock.Lease)
		for _, lease := range leases {
			mu.Lock()
			table[lease.Handle] = lease
			mu.Unlock()
			lease.AfterEnd(func() {
				mu.Lock()
				if table[lease.Handle] == lease {
					delete(table, lease.Handle)
				}
				mu.Unlock()
			})
		}
		withTable := heapInUse()
		if l.fsm.NumLocks() != n {
			b.Fatalf("%d locks held, want %d", l.fsm.NumLocks(), n)
		}
		b.ReportMetric(float64(held-before)/float64(n), "leader-B/lease")
		b.ReportMetric(float64(withTable-before)/float64(n), "with-table-B/lease")
		for _, s := range ss {
			if err := sl.CloseSession(ctx, s); err != nil {
				b.Fatal(err)
			}
		}
		mu.Lock()
		left := len(table)
		mu.Unlock()
		if left != 0 {
			b.Fatalf("%d leases left in the table after their sessions closed", left)
		}
		runtime.KeepAlive(leases)
		sl.Close()
		c.Shutdown()
		cancel()
	}
}
