package report

import (
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Percentiles of a latency distribution, in µs.
type Percentiles struct {
	P50  float64 `json:"p50"`
	P90  float64 `json:"p90"`
	P99  float64 `json:"p99"`
	P999 float64 `json:"p999"`
	Max  float64 `json:"max"`
}

// Histogram bounds: 1 µs to 10 minutes, 3 significant digits.
const (
	HistMin    = 1
	HistMax    = int64(10 * time.Minute / time.Microsecond)
	HistDigits = 3
)

func NewHist() *hdrhistogram.Histogram { return hdrhistogram.New(HistMin, HistMax, HistDigits) }

func PercentilesOf(h *hdrhistogram.Histogram) Percentiles {
	return Percentiles{
		P50:  float64(h.ValueAtQuantile(50)),
		P90:  float64(h.ValueAtQuantile(90)),
		P99:  float64(h.ValueAtQuantile(99)),
		P999: float64(h.ValueAtQuantile(99.9)),
		Max:  float64(h.Max()),
	}
}

// MedianOf is the median of v (0 for none); v is reordered.
func MedianOf(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	slices.Sort(v)
	if len(v)%2 == 1 {
		return v[len(v)/2]
	}
	return (v[len(v)/2-1] + v[len(v)/2]) / 2
}

func Millis(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
