package client_test

import (
	"context"
	"log/slog"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/backend/sqllock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// overheadBlock is how many cycles of one path run before the other path's
// turn: short enough that the load of a shared machine, which moves over
// seconds, weighs on both paths alike; long enough that the switch between
// them (cold caches for the first cycle or two) is a small part of it.
const overheadBlock = 100

// BenchmarkGatewayOverhead measures what the gateway path adds to one
// acquire + release cycle over the direct path, on the same Locker in the
// same process: direct calls the Locker; gateway calls the SDK, which speaks
// the WebSocket protocol over loopback to a gateway serving that Locker.
// The two paths run in alternating blocks of overheadBlock cycles. It
// reports each path's p50 over all its cycles, added-µs (their difference:
// the goal's "adds ≤ 60 µs p50 per cycle"), and added-paired-µs, the
// median over consecutive pairs of blocks of the difference of their p50s,
// which is less sensitive to the load moving during the run.
//
//	go test -run '^$' -bench GatewayOverhead -benchtime 20000x ./client/
//
// The postgres case starts a PostgreSQL server (internal/testenv) and is
// skipped where none can be started.
func BenchmarkGatewayOverhead(b *testing.B) {
	b.Run("mem", func(b *testing.B) {
		store := locktest.NewMemStore()
		l := store.NewLocker()
		b.Cleanup(func() { l.Close() })
		benchOverhead(b, l)
	})
	b.Run("postgres", func(b *testing.B) {
		pg := testenv.StartPostgres(b)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		l, err := sqllock.New(ctx, sqllock.Config{URL: pg.URL})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { l.Close() })
		benchOverhead(b, l)
	})
	// raft: a durable three-node raftlock cluster in this process. Direct
	// calls the leader Node; the gateway path is the one `lockgate node`
	// serves, the leader's own gateway (raftgw.Serve) on its API address.
	b.Run("raft", func(b *testing.B) {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := raftlock.StartLocalCluster(ctx, 3, b.TempDir(), func(cfg *raftlock.Config) {
			cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
			cfg.Logger = slog.New(slog.DiscardHandler)
		})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(c.Shutdown)
		leader, err := c.Leader(ctx)
		if err != nil {
			b.Fatal(err)
		}
		for _, s := range c.Servers {
			g := raftgw.Serve(s, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
			b.Cleanup(func() { g.Close() })
		}
		benchPaths(b, leader, leader.APIAddr())
	})
}

// benchOverhead runs the paired measurement of BenchmarkGatewayOverhead
// over l, served by a gateway of its own.
func benchOverhead(b *testing.B, l lock.Locker) {
	g := gateway.New(l, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(g)
	b.Cleanup(func() {
		g.Close()
		srv.Close()
	})
	benchPaths(b, l, strings.TrimPrefix(srv.URL, "http://"))
}

// benchPaths alternates cycles on l (direct) with cycles through the SDK
// connected to the gateway at endpoint, which serves l; each iteration is
// one cycle of either path.
func benchPaths(b *testing.B, l lock.Locker, endpoint string) {
	sdk := newClient(b, []string{endpoint}, client.Options{})
	ctx := context.Background()
	opts := lock.AcquireOptions{TTL: time.Minute}
	paths := [2]struct {
		l   lock.Locker
		key string
	}{{l, "overhead-direct"}, {sdk, "overhead-gateway"}}
	cycle := func(side int) time.Duration {
		p := paths[side]
		start := time.Now()
		lease, err := p.l.Acquire(ctx, p.key, opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.l.Release(ctx, lease); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// Warm up both paths: connections, pools, prepared statements, the
	// gateway's workers.
	for range overheadBlock {
		cycle(0)
		cycle(1)
	}
	var (
		all    [2][]time.Duration // every cycle, by path
		blocks [2][]time.Duration // each block's p50, by path
		cur    []time.Duration
	)
	i := 0
	for b.Loop() {
		side := (i / overheadBlock) % 2
		d := cycle(side)
		all[side] = append(all[side], d)
		cur = append(cur, d)
		i++
		if i%overheadBlock == 0 {
			blocks[side] = append(blocks[side], p50(cur))
			cur = cur[:0]
		}
	}
	if len(blocks[1]) == 0 {
		return // too few iterations for a pair of blocks
	}
	diffs := make([]time.Duration, len(blocks[1]))
	for k := range diffs {
		diffs[k] = blocks[1][k] - blocks[0][k]
	}
	direct, viaGateway := p50(all[0]), p50(all[1])
	µs := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1e3 }
	b.ReportMetric(µs(direct), "direct-p50-µs")
	b.ReportMetric(µs(viaGateway), "gateway-p50-µs")
	b.ReportMetric(µs(viaGateway-direct), "added-µs")
	b.ReportMetric(µs(p50(diffs)), "added-paired-µs")
	b.ReportMetric(0, "ns/op") // a cycle of either path: not a useful number
}

func p50(d []time.Duration) time.Duration {
	d = slices.Clone(d)
	slices.Sort(d)
	return d[len(d)/2]
}
