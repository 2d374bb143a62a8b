package store_test

import (
	"fmt"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// BenchmarkApply measures leader.Apply on a real three-node Raft cluster over
// loopback TCP, each node on its own store of the kind under test:
//
//	clients=1:  sequential applies; p50-µs/p99-µs is commit latency.
//	clients=64: 64 goroutines applying; applies/s is throughput.
//
// Reproduce: go test -run '^$' -bench Apply -benchtime 2s -count 5 ./backend/raftlock/store
func BenchmarkApply(b *testing.B) {
	for _, kind := range allKinds {
		b.Run(string(kind), func(b *testing.B) {
			c := startCluster(b, kind, 3)
			for _, clients := range []int{1, 64} {
				b.Run(fmt.Sprintf("clients=%d", clients), func(b *testing.B) {
					benchApply(b, c.leader, clients)
				})
			}
		})
	}
}

// command is a small payload, about the size of a lock grant.
var command = []byte(`{"op":"acquire","key":"locks/orders/42","owner":"c-0001","ttl":15}`)

func benchApply(b *testing.B, leader *raft.Raft, clients int) {
	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	var firstErr error
	var errOnce sync.Once
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1) - 1
				if i >= int64(b.N) {
					return
				}
				t0 := time.Now()
				if err := leader.Apply(command, 10*time.Second).Error(); err != nil {
					errOnce.Do(func() { firstErr = err })
					return
				}
				lat[i] = time.Since(t0)
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	if firstErr != nil {
		b.Fatalf("apply: %v", firstErr)
	}
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "applies/s")
	b.ReportMetric(percentile(lat, 0.50), "p50-µs")
	b.ReportMetric(percentile(lat, 0.99), "p99-µs")
}

// percentile returns the nearest-rank p-th percentile of sorted, in µs.
func percentile(sorted []time.Duration, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(math.Ceil(p*float64(len(sorted)))) - 1
	i = max(0, min(i, len(sorted)-1))
	return float64(sorted[i]) / float64(time.Microsecond)
}
