package redlock

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-redsync/redsync/v4"
	redsyncredis "github.com/go-redsync/redsync/v4/redis"
	"github.com/go-redsync/redsync/v4/redis/goredis/v9"
	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// benchServers are the five Redis masters shared by every benchmark (ours
// and redsync's, in the same run). TestMain starts them when benchmarks run.
var benchServers []*testenv.Redis

const benchTTL = 8 * time.Second // redsync's default expiry

func benchSetup(b *testing.B) (*Locker, *redsync.Redsync) {
	b.Helper()
	if benchServers == nil {
		b.Skip("redis-server not available")
	}
	l := newLocker(b, benchServers, nil)
	var pools []redsyncredis.Pool
	for _, r := range benchServers {
		c := redis.NewClient(&redis.Options{Addr: r.Addr})
		b.Cleanup(func() { c.Close() })
		pools = append(pools, goredis.NewPool(c))
	}
	return l, redsync.New(pools...)
}

var benchSeq atomic.Int64

func benchKey(name string) string {
	return fmt.Sprintf("bench.%s.%d.%d", name, time.Now().UnixNano(), benchSeq.Add(1))
}

// BenchmarkSequential: one client, acquire + release of a free key; the
// p50-µs metric is the median cycle, acquire-p50-µs and release-p50-µs its
// halves.
func BenchmarkSequential(b *testing.B) {
	l, rs := benchSetup(b)
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		key := benchKey("seq")
		var lease *lock.Lease
		locktest.BenchCycles(b, func() (err error) {
			lease, err = l.Acquire(ctx, key, lock.AcquireOptions{TTL: benchTTL})
			return err
		}, func() error {
			return l.Release(ctx, lease)
		})
	})
	b.Run("redsync", func(b *testing.B) {
		m := rs.NewMutex(benchKey("seq"), redsync.WithExpiry(benchTTL))
		locktest.BenchCycles(b, func() error {
			return m.LockContext(ctx)
		}, func() error {
			_, err := m.UnlockContext(ctx)
			return err
		})
	})
}

// BenchmarkContended: 32 clients on one key, each cycle an acquisition and
// a release; acquisitions/s.
func BenchmarkContended(b *testing.B) {
	l, rs := benchSetup(b)
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		key := benchKey("contended")
		locktest.BenchRate(b, 32, "acquisitions/s", func(int) bool {
			lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: benchTTL})
			if err != nil {
				b.Error(err)
				return true
			}
			if err := l.Release(ctx, lease); err != nil {
				b.Error(err)
			}
			return true
		})
	})
	b.Run("redsync", func(b *testing.B) {
		key := benchKey("contended")
		mutexes := make([]*redsync.Mutex, 32)
		for i := range mutexes {
			mutexes[i] = rs.NewMutex(key, redsync.WithExpiry(benchTTL))
		}
		locktest.BenchRate(b, 32, "acquisitions/s", func(g int) bool {
			m := mutexes[g]
			if err := m.LockContext(ctx); err != nil {
				return false // ErrFailed after its tries: try again
			}
			if _, err := m.UnlockContext(ctx); err != nil {
				b.Error(err)
			}
			return true
		})
	})
}

// BenchmarkOwnKeys: 32 clients, each on its own key; cycles/s.
func BenchmarkOwnKeys(b *testing.B) {
	l, rs := benchSetup(b)
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		keys := make([]string, 32)
		for i := range keys {
			keys[i] = benchKey("own")
		}
		locktest.BenchRate(b, 32, "cycles/s", func(g int) bool {
			lease, err := l.Acquire(ctx, keys[g], lock.AcquireOptions{TTL: benchTTL})
			if err != nil {
				b.Error(err)
				return true
			}
			if err := l.Release(ctx, lease); err != nil {
				b.Error(err)
			}
			return true
		})
	})
	b.Run("redsync", func(b *testing.B) {
		mutexes := make([]*redsync.Mutex, 32)
		for i := range mutexes {
			mutexes[i] = rs.NewMutex(benchKey("own"), redsync.WithExpiry(benchTTL))
		}
		locktest.BenchRate(b, 32, "cycles/s", func(g int) bool {
			m := mutexes[g]
			if err := m.LockContext(ctx); err != nil {
				b.Error(err)
				return true
			}
			if _, err := m.UnlockContext(ctx); err != nil {
				b.Error(err)
			}
			return true
		})
	})
}
