package gateway

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
	"github.com/lockgate/lockgate/lock/locktest"
)

// BenchmarkConnGrant measures a connection's bookkeeping per grant and
// release while it holds n other leases: the cost must not grow with n
// (a sweep of every lease on each grant once made 8,000 held leases
// cost 10x the CPU of 2,000).
func BenchmarkConnGrant(b *testing.B) {
	for _, n := range []int{100, 1000, 8000} {
		b.Run(fmt.Sprintf("held=%d", n), func(b *testing.B) {
			g := New(locktest.NewMemStore().NewLocker(), Options{MaxLocksPerConn: 2 * n})
			b.Cleanup(func() { g.Close() })
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := g.newConn(nil, ctx, cancel)
			opts := lock.AcquireOptions{TTL: time.Hour, Owner: "bench"}
			grant := func(key string) *lock.Lease {
				if aerr := c.reserveLock(1); aerr != nil {
					b.Fatal(aerr)
				}
				lease, err := g.l.TryAcquire(ctx, key, opts)
				if err != nil {
					b.Fatal(err)
				}
				c.granted(wire.Request{CommandType: wire.CmdTryAcquire, Key: key}, time.Now(), lease, nil)
				return lease
			}
			for i := range n {
				grant(fmt.Sprint("held-", i))
			}
			for b.Loop() {
				lease := grant("cycled")
				if err := g.l.Release(ctx, lease); err != nil {
					b.Fatal(err)
				}
				c.forget(lease.Handle)
			}
			if got := c.liveLeases(); got != n {
				b.Fatalf("%d leases held after the loop, want %d", got, n)
			}
		})
	}
}

// BenchmarkSessionLeaseBytes measures what the gateway keeps per held
// session lease on its heap (the scale goal: at most 400 B per lease on the
// leader with 1,000,000 leases in 1,000 sessions, the gateway's share
// included): the connection's table entry and its end callback, beyond the
// lock.Lease the backend made. It also reports the lock.Lease's own bytes
// (a session lease's, built as a backend builds it), for the total.
func BenchmarkSessionLeaseBytes(b *testing.B) {
	const n = 100_000
	for b.Loop() {
		g := New(locktest.NewMemStore().NewLocker(), Options{MaxLocksPerConn: n})
		ctx, cancel := context.WithCancel(context.Background())
		c := g.newConn(nil, ctx, cancel)
		s := kit.NewSession(kit.SessionGrant{ID: lock.NewHandle(), Owner: "bench", TTL: time.Hour, Sent: time.Now()})
		base := heapInUse()
		leases := make([]*lock.Lease, n)
		for i := range leases {
			leases[i] = kit.NewLease(kit.Grant{Key: fmt.Sprint("session-lease-", i), Owner: "bench", Token: lock.Token(i + 1),
				Handle: lock.NewHandle(), TTL: time.Hour, Session: s})
		}
		made := heapInUse()
		for _, l := range leases {
			c.acquiring++
			if !c.hold(wire.Request{CommandType: wire.CmdAcquire, Key: l.Key}, l) {
				b.Fatal("the connection ended")
			}
		}
		held := heapInUse()
		if got := c.liveLeases(); got != n {
			b.Fatalf("%d leases held, want %d", got, n)
		}
		b.ReportMetric(float64(held-made)/n, "gateway-B/lease")
		b.ReportMetric(float64(made-base)/n, "lease-B/lease")
		s.End(nil) // every lease ends, and leaves the connection's table
		if got := c.liveLeases(); got != 0 {
			b.Fatalf("%d leases left in the table after their session ended", got)
		}
		cancel()
		g.Close()
	}
}

// heapInUse is the live heap after two collections.
func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
