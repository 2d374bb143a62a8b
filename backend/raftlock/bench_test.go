package raftlock

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
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

	// Floor measurements, for the ratios reported by the other benchmarks.
	floorLatency    atomic.Int64 // p50 of one Apply, ns
	floorThroughput atomic.Int64 // Applies/s with 64 appliers
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
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
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
		m := p50(samples)
		floorLatency.Store(int64(m))
		b.ReportMetric(float64(m.Microseconds()), "p50-µs")
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
		rate := float64(b.N) / time.Since(start).Seconds()
		floorThroughput.Store(int64(rate))
		b.ReportMetric(rate, "applies/s")
	})
}

// BenchmarkCycle is sequential acquire+release of one key by one client:
// two commits. Goal: ≤ 2.3× the floor's single-Apply latency.
func BenchmarkCycle(b *testing.B) {
	l := benchLeader(b)
	s := l.NewSession()
	defer s.Close()
	ctx := context.Background()
	samples := make([]time.Duration, 0, b.N)
	for b.Loop() {
		start := time.Now()
		lease, err := s.Acquire(ctx, "bench-cycle", lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, lease); err != nil {
			b.Fatal(err)
		}
		samples = append(samples, time.Since(start))
	}
	m := p50(samples)
	b.ReportMetric(float64(m.Microseconds()), "p50-µs")
	if f := floorLatency.Load(); f > 0 {
		b.ReportMetric(float64(m)/float64(f), "x-floor-apply")
	}
}

// BenchmarkCycleParallel is 32 clients each cycling its own key. Goal: ≥
// 0.4× the floor's 64-applier throughput, in cycles/s.
func BenchmarkCycleParallel(b *testing.B) {
	l := benchLeader(b)
	ctx := context.Background()
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for c := range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := l.NewSession()
			defer s.Close()
			key := fmt.Sprintf("bench-parallel-%d", c)
			for next.Add(1) <= int64(b.N) {
				lease, err := s.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				if err := s.Release(ctx, lease); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	rate := float64(b.N) / time.Since(start).Seconds()
	b.ReportMetric(rate, "cycles/s")
	if f := floorThroughput.Load(); f > 0 {
		b.ReportMetric(rate/float64(f), "x-floor-throughput")
	}
}

// BenchmarkHandoff is 32 clients contending one key; one op is one handoff
// (a release and the grant of the next waiter). Goal: ≤ 1.5 floor commits
// per handoff.
func BenchmarkHandoff(b *testing.B) {
	l := benchLeader(b)
	ctx := context.Background()
	var next atomic.Int64
	start := time.Now()
	var wg sync.WaitGroup
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := l.NewSession()
			defer s.Close()
			for next.Add(1) <= int64(b.N) {
				lease, err := s.Acquire(ctx, "bench-handoff", lock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					b.Error(err)
					return
				}
				if err := s.Release(ctx, lease); err != nil {
					b.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	rate := float64(b.N) / elapsed.Seconds()
	b.ReportMetric(rate, "handoffs/s")
	if f := floorLatency.Load(); f > 0 {
		perHandoff := elapsed / time.Duration(b.N)
		b.ReportMetric(float64(perHandoff)/float64(f), "floor-commits/handoff")
	}
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
