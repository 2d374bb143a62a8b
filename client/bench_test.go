package client_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// BenchmarkGatewayCycle measures one acquire+release cycle through the SDK,
// the gateway and the in-memory reference locker over loopback, and the
// same cycle on the reference locker called directly, in alternating rounds
// (A B A B …) so that the machine's drift hits both alike. It reports the
// median cycle of each and their difference: what the SDK, the protocol and
// the gateway add (goal: ≤ 60 µs). Run:
//
//	go test -run '^$' -bench GatewayCycle -benchtime 20000x ./client/
func BenchmarkGatewayCycle(b *testing.B) {
	store := locktest.NewMemStore()
	addr := startMemGateway(b, store)
	sdk := newClient(b, []string{addr}, client.Options{})
	direct := store.NewLocker()
	defer direct.Close()
	ctx := context.Background()
	opts := lock.AcquireOptions{TTL: time.Minute}

	cycle := func(l lock.Locker, key string) time.Duration {
		start := time.Now()
		lease, err := l.Acquire(ctx, key, opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := l.Release(ctx, lease); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	// Warm up: connection, buffers, the gateway's goroutines.
	for range 200 {
		cycle(sdk, "bench-sdk")
		cycle(direct, "bench-direct")
	}

	const rounds = 20
	per := max(b.N/rounds, 1)
	viaSDK := make([]time.Duration, 0, per*rounds)
	viaDirect := make([]time.Duration, 0, per*rounds)
	b.ResetTimer()
	for range rounds {
		for range per {
			viaSDK = append(viaSDK, cycle(sdk, "bench-sdk"))
		}
		for range per {
			viaDirect = append(viaDirect, cycle(direct, "bench-direct"))
		}
	}
	b.StopTimer()
	p50, direct50 := median(viaSDK), median(viaDirect)
	b.ReportMetric(float64(p50.Nanoseconds())/1e3, "p50-µs")
	b.ReportMetric(float64(direct50.Nanoseconds())/1e3, "direct-p50-µs")
	b.ReportMetric(float64((p50-direct50).Nanoseconds())/1e3, "added-µs")
	b.ReportMetric(float64(percentile(viaSDK, 99).Nanoseconds())/1e3, "p99-µs")
}

func median(s []time.Duration) time.Duration { return percentile(s, 50) }

func percentile(s []time.Duration, p int) time.Duration {
	if len(s) == 0 {
		return 0
	}
	s = slices.Clone(s)
	slices.Sort(s)
	return s[min(len(s)*p/100, len(s)-1)]
}

// BenchmarkCacheHit is the client's cost of a cycle answered by the lease
// cache (acquire and release of a kept lease: no round trip), the bound
// of the affinity workload's own-key cycles.
func BenchmarkCacheHit(b *testing.B) {
	addr := startMemGateway(b, locktest.NewMemStore())
	c := newClient(b, []string{addr}, client.Options{CacheLeases: true})
	ctx := context.Background()
	opts := lock.AcquireOptions{TTL: 30 * time.Second}
	b.ReportAllocs()
	for b.Loop() {
		l, err := c.Acquire(ctx, "k", opts)
		if err != nil {
			b.Fatal(err)
		}
		if err := c.Release(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
	if s := c.CacheStats(); s.Hits == 0 {
		b.Fatalf("no cache hits: %+v", s)
	}
}
