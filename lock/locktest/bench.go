package locktest

import (
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// BenchCycles runs acquire then release once per b.Loop iteration and
// reports the median cycle as p50-µs and its halves as acquire-p50-µs and
// release-p50-µs: the form every backend's sequential benchmark reports
// beside its baseline's.
func BenchCycles(b *testing.B, acquire, release func() error) {
	b.Helper()
	var cyc, acq, rel []time.Duration
	for b.Loop() {
		start := time.Now()
		if err := acquire(); err != nil {
			b.Fatal(err)
		}
		mid := time.Now()
		if err := release(); err != nil {
			b.Fatal(err)
		}
		end := time.Now()
		cyc, acq, rel = append(cyc, end.Sub(start)), append(acq, mid.Sub(start)), append(rel, end.Sub(mid))
	}
	b.ReportMetric(medianMicros(cyc), "p50-µs")
	b.ReportMetric(medianMicros(acq), "acquire-p50-µs")
	b.ReportMetric(medianMicros(rel), "release-p50-µs")
}

// medianMicros is the median of d in µs (0 for none).
func medianMicros(d []time.Duration) float64 {
	if len(d) == 0 {
		return 0
	}
	d = slices.Clone(d)
	slices.Sort(d)
	return float64(d[len(d)/2].Microseconds())
}

// BenchRate runs clients goroutines until b.N cycles are done and reports
// cycles per second as unit. cycle(g) runs one cycle of client g and
// reports whether it counts; false means try again (a baseline that gave
// up after its own retries). Cycles report their errors with b.Error.
func BenchRate(b *testing.B, clients int, unit string, cycle func(g int) bool) {
	b.Helper()
	var left atomic.Int64
	left.Store(int64(b.N))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for left.Add(-1) >= 0 {
				for !cycle(g) {
				}
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), unit)
}
