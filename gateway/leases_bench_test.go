package gateway

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// BenchmarkConnGrant measures a connection's bookkeeping per grant and
// release while it holds n other leases: the cost must not grow with n
// (issue 15: a sweep of every lease on each grant made 8,000 held leases
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
