package sqllock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// shared returns the shared server, or, if it could not be started, starts
// one for t, which skips or (under CI=true) fails the test as testenv does.
func shared(t testing.TB) *testenv.Postgres {
	t.Helper()
	if sharedServer != nil {
		return sharedServer
	}
	return testenv.StartPostgres(t)
}

const benchTTL = 8 * time.Second

// The raw baseline: the hand-written table lock of the classic
// database-lock design, with a fencing token,
// two prepared statements, no waiting support.
const (
	rawSchema = `
CREATE SEQUENCE IF NOT EXISTS raw_token_seq;
CREATE TABLE IF NOT EXISTS raw_locks (
    key text PRIMARY KEY, owner text NOT NULL, token bigint NOT NULL,
    expires_at timestamptz NOT NULL)`
	rawAcquire = `
INSERT INTO raw_locks AS l (key, owner, token, expires_at)
VALUES ($1, $2, nextval('raw_token_seq'), now() + $3::bigint * interval '1 microsecond')
ON CONFLICT (key) DO UPDATE
   SET owner = EXCLUDED.owner, token = EXCLUDED.token, expires_at = EXCLUDED.expires_at
 WHERE l.expires_at < now()
RETURNING token`
	rawRelease = `DELETE FROM raw_locks WHERE key = $1 AND token = $2`
)

// rawLock is the baseline client.
type rawLock struct{ pool *pgxpool.Pool }

// try makes one attempt; false when the key is held.
func (r rawLock) try(ctx context.Context, key string) (int64, bool, error) {
	var token int64
	err := r.pool.QueryRow(ctx, rawAcquire, key, "raw", benchTTL.Microseconds()).Scan(&token)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	return token, err == nil, err
}

// acquire retries every 1–10 ms (uniform jitter) until the key is free:
// the retry loop of a typical hand-written lock.
func (r rawLock) acquire(ctx context.Context, key string) (int64, error) {
	for {
		token, ok, err := r.try(ctx, key)
		if ok || err != nil {
			return token, err
		}
		time.Sleep(time.Millisecond + rand.N(9*time.Millisecond))
	}
}

func (r rawLock) release(ctx context.Context, key string, token int64) error {
	_, err := r.pool.Exec(ctx, rawRelease, key, token)
	return err
}

func benchSetup(b *testing.B) (*Locker, rawLock) {
	b.Helper()
	srv := shared(b)
	l := newLocker(b, srv, nil)
	cfg, err := pgxpool.ParseConfig(srv.URL)
	if err != nil {
		b.Fatal(err)
	}
	cfg.MaxConns = 32 // one connection per client: the baseline's best case
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(pool.Close)
	if _, err := pool.Exec(context.Background(), rawSchema); err != nil {
		b.Fatal(err)
	}
	raw := rawLock{pool}
	warmUp(b, l, raw)
	return l, raw
}

// warmUp runs both clients for a while before anything is measured: a
// freshly started server (cold caches, the tables' first pages, autovacuum)
// otherwise penalizes whichever sub-benchmark runs first.
func warmUp(b *testing.B, l *Locker, raw rawLock) {
	ctx := context.Background()
	key := benchKey("warmup")
	for range 500 {
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: benchTTL})
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, lease); err != nil {
			b.Fatal(err)
		}
		token, err := raw.acquire(ctx, key)
		if err != nil {
			b.Fatal(err)
		}
		if err := raw.release(ctx, key, token); err != nil {
			b.Fatal(err)
		}
	}
}

var benchSeq atomic.Int64

func benchKey(name string) string {
	return fmt.Sprintf("bench.%s.%d.%d", name, time.Now().UnixNano(), benchSeq.Add(1))
}

// BenchmarkSequential: one client, acquire + release of a free key; the
// p50-µs metric is the median cycle, acquire-p50-µs and release-p50-µs its
// halves.
func BenchmarkSequential(b *testing.B) {
	l, raw := benchSetup(b)
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
	b.Run("raw", func(b *testing.B) {
		key := benchKey("seq")
		var token int64
		locktest.BenchCycles(b, func() (err error) {
			var ok bool
			token, ok, err = raw.try(ctx, key)
			if err == nil && !ok {
				err = fmt.Errorf("%q held", key)
			}
			return err
		}, func() error {
			return raw.release(ctx, key, token)
		})
	})
}

// BenchmarkContended: 32 clients on one key, each cycle an acquisition and
// a release; acquisitions/s. Ours: the 32 clients share one Locker (one
// gateway). Raw: 32 clients on a 32-connection pool, retrying every
// 1–10 ms.
func BenchmarkContended(b *testing.B) {
	l, raw := benchSetup(b)
	ctx := context.Background()
	b.Run("ours", func(b *testing.B) {
		key := benchKey("contended")
		h0, a0 := l.stats.handoffs.Load(), l.stats.attempts.Load()
		defer func() {
			h, a := l.stats.handoffs.Load()-h0, l.stats.attempts.Load()-a0
			b.ReportMetric(float64(h)/float64(h+a), "handoff-ratio")
			b.ReportMetric(float64(a)/float64(b.N), "attempts/op")
		}()
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
	b.Run("raw", func(b *testing.B) {
		key := benchKey("contended")
		locktest.BenchRate(b, 32, "acquisitions/s", func(int) bool {
			token, err := raw.acquire(ctx, key)
			if err != nil {
				b.Error(err)
				return true
			}
			if err := raw.release(ctx, key, token); err != nil {
				b.Error(err)
			}
			return true
		})
	})
}

// BenchmarkSequentialPaired: BenchmarkSequential's two cycles in
// alternating blocks of 100, so that the load of a shared machine, which
// moves over seconds, weighs on ours and raw alike. ratio is the median,
// over consecutive pairs of blocks, of ours' p50 over raw's p50; ours-p50-µs
// and raw-p50-µs are the p50s over all cycles. Each iteration is one cycle
// of either.
func BenchmarkSequentialPaired(b *testing.B) {
	l, raw := benchSetup(b)
	ctx := context.Background()
	oursKey, rawKey := benchKey("paired"), benchKey("paired")
	const block = 100
	var all [2][]time.Duration // ours, raw
	var blocks [2][]float64    // per-block p50s
	var cur []time.Duration
	median := func(d []time.Duration) time.Duration {
		d = slices.Clone(d)
		slices.Sort(d)
		return d[len(d)/2]
	}
	i := 0
	for b.Loop() {
		side := (i / block) % 2
		start := time.Now()
		if side == 0 {
			lease, err := l.Acquire(ctx, oursKey, lock.AcquireOptions{TTL: benchTTL})
			if err != nil {
				b.Fatal(err)
			}
			if err := l.Release(ctx, lease); err != nil {
				b.Fatal(err)
			}
		} else {
			token, ok, err := raw.try(ctx, rawKey)
			if err == nil && !ok {
				err = fmt.Errorf("%q held", rawKey)
			}
			if err == nil {
				err = raw.release(ctx, rawKey, token)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		d := time.Since(start)
		all[side] = append(all[side], d)
		cur = append(cur, d)
		i++
		if i%block == 0 {
			blocks[side] = append(blocks[side], float64(median(cur)))
			cur = cur[:0]
		}
	}
	if len(blocks[1]) == 0 {
		return // too few iterations for a pair
	}
	ratios := make([]float64, len(blocks[1]))
	for k := range ratios {
		ratios[k] = blocks[0][k] / blocks[1][k]
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(median(all[0]).Microseconds()), "ours-p50-µs")
	b.ReportMetric(float64(median(all[1]).Microseconds()), "raw-p50-µs")
	b.ReportMetric(ratios[len(ratios)/2], "ratio")
}
