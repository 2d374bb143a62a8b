package zklike

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// benchEtcd is the three-member cluster shared by every benchmark (ours
// and concurrency.Mutex's, in the same run). TestMain starts it when
// benchmarks run.
var benchEtcd *testenv.Etcd

func benchCluster(b *testing.B) *testenv.Etcd {
	b.Helper()
	if benchEtcd == nil {
		b.Skip("etcd not available")
	}
	return benchEtcd
}

var benchSeq atomic.Int64

func benchKey(name string) string {
	return fmt.Sprintf("bench.%s.%d.%d", name, time.Now().UnixNano(), benchSeq.Add(1))
}

// BenchmarkSequential: one client, acquire + release of a free key, p50 of
// the cycle (and of its halves) in µs. Per cycle:
//
//   - ours: zero options (DefaultTTL, auto-renewed), so the key goes under
//     the Locker's session lease: one Txn (put + read the two newest
//     contenders) to acquire, one Txn (compare create revision + delete)
//     to release.
//   - mutex: concurrency.Mutex on one concurrency.Session: one Txn (put +
//     read the oldest contender) to Lock, one Delete to Unlock.
//   - ours-ttl: an explicit TTL without auto-renewal, which needs a lease
//     of its own: LeaseGrant + Txn to acquire, Txn to release (the
//     lease's revoke is sent in the background).
//
// The session leases are granted once, outside the timed loop, on both
// sides.
func BenchmarkSequential(b *testing.B) {
	e := benchCluster(b)
	ctx := context.Background()
	ours := func(opts lock.AcquireOptions) func(b *testing.B) {
		return func(b *testing.B) {
			l := newLocker(b, e, nil)
			key := benchKey("seq")
			// Warm up: the session lease and the connection.
			warm, err := l.Acquire(ctx, key, opts)
			if err != nil {
				b.Fatal(err)
			}
			l.Release(ctx, warm)
			var lease *lock.Lease
			locktest.BenchCycles(b, func() (err error) {
				lease, err = l.Acquire(ctx, key, opts)
				return err
			}, func() error {
				return l.Release(ctx, lease)
			})
		}
	}
	b.Run("ours", ours(lock.AcquireOptions{}))
	b.Run("mutex", func(b *testing.B) {
		cli := rawClient(b, e.Endpoints...)
		s, err := concurrency.NewSession(cli)
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		m := concurrency.NewMutex(s, benchKey("seq"))
		if err := m.Lock(ctx); err != nil {
			b.Fatal(err)
		}
		m.Unlock(ctx)
		locktest.BenchCycles(b, func() error { return m.Lock(ctx) }, func() error { return m.Unlock(ctx) })
	})
	b.Run("ours-ttl", ours(lock.AcquireOptions{TTL: 20 * time.Second}))
}

// BenchmarkSequentialPaired: BenchmarkSequential's "ours" and "mutex"
// cycles alternated one by one (the order flipping every iteration), so
// that both see the same machine load: on a shared 2-core VM the load
// moves over seconds, and the two halves of BenchmarkSequential, which
// run one after the other, differ by ±30 % from run to run for that alone.
// It reports each side's p50 cycle and their ratio.
func BenchmarkSequentialPaired(b *testing.B) {
	e := benchCluster(b)
	ctx := context.Background()
	l := newLocker(b, e, nil)
	key := benchKey("paired")
	cli := rawClient(b, e.Endpoints...)
	s, err := concurrency.NewSession(cli)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	m := concurrency.NewMutex(s, benchKey("paired"))
	var lease *lock.Lease
	sides := [2]struct{ acquire, release func() error }{
		{func() (err error) { lease, err = l.Acquire(ctx, key, lock.AcquireOptions{}); return err },
			func() error { return l.Release(ctx, lease) }},
		{func() error { return m.Lock(ctx) }, func() error { return m.Unlock(ctx) }},
	}
	for _, side := range sides { // warm up: session leases, connections
		if err := side.acquire(); err != nil {
			b.Fatal(err)
		}
		if err := side.release(); err != nil {
			b.Fatal(err)
		}
	}
	var cycles [2][]time.Duration
	flip := 0
	for b.Loop() {
		flip ^= 1
		for j := range 2 {
			k := j ^ flip
			start := time.Now()
			if err := sides[k].acquire(); err != nil {
				b.Fatal(err)
			}
			if err := sides[k].release(); err != nil {
				b.Fatal(err)
			}
			cycles[k] = append(cycles[k], time.Since(start))
		}
	}
	p50 := func(d []time.Duration) float64 {
		d = slices.Clone(d)
		slices.Sort(d)
		return float64(d[len(d)/2].Microseconds())
	}
	ours, mutex := p50(cycles[0]), p50(cycles[1])
	b.ReportMetric(ours, "ours-p50-µs")
	b.ReportMetric(mutex, "mutex-p50-µs")
	b.ReportMetric(ours/mutex, "ours/mutex")
}

// contend runs clients goroutines, each with its own etcd connection, on
// one key until b.N handoffs are done, and reports handoffs/s.
func contend(b *testing.B, clients int, cycle func(g int) error) {
	locktest.BenchRate(b, clients, "handoffs/s", func(g int) bool {
		if err := cycle(g); err != nil {
			b.Error(err)
		}
		return true
	})
}

// BenchmarkContended: 32 clients (32 etcd connections) contending one key;
// each cycle is an acquisition and a release, so every acquisition but the
// first is a handoff from one client to the next. Ours with zero options
// (session lease); concurrency.Mutex with one Session per client (clients
// sharing a Session would share one key and all "hold" it at once).
func BenchmarkContended(b *testing.B) { benchContended(b, 32) }

// BenchmarkHandoff: two clients taking turns on one key, so that every
// waiter's turn comes within a millisecond or two of its enqueueing. That
// isolates the handoff latency: a waiter whose watch landed in etcd's
// unsynced group (concurrency.Mutex's) hears the release only at the next
// 100 ms sync; with 32 clients the queue may take longer than that to
// drain, which hides the stall behind the queue.
func BenchmarkHandoff(b *testing.B) { benchContended(b, 2) }

func benchContended(b *testing.B, clients int) {
	e := benchCluster(b)
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		key := benchKey("contended")
		ls := make([]*Locker, clients)
		for i := range ls {
			ls[i] = newLocker(b, e, nil)
			warm, err := ls[i].Acquire(ctx, key, lock.AcquireOptions{})
			if err != nil {
				b.Fatal(err)
			}
			ls[i].Release(ctx, warm)
		}
		contend(b, clients, func(g int) error {
			lease, err := ls[g].Acquire(ctx, key, lock.AcquireOptions{})
			if err != nil {
				return err
			}
			return ls[g].Release(ctx, lease)
		})
	})
	b.Run("mutex", func(b *testing.B) {
		key := benchKey("contended")
		ms := make([]*concurrency.Mutex, clients)
		for i := range ms {
			cli := rawClient(b, e.Endpoints...)
			s, err := concurrency.NewSession(cli)
			if err != nil {
				b.Fatal(err)
			}
			b.Cleanup(func() { s.Close() })
			ms[i] = concurrency.NewMutex(s, key)
		}
		contend(b, clients, func(g int) error {
			if err := ms[g].Lock(ctx); err != nil {
				return err
			}
			return ms[g].Unlock(ctx)
		})
	})
}
