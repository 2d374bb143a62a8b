package check

import (
	"sort"
	"time"
)

// Availability measures how long the lock service could not grant locks.
//
// unavailable is the total length of the gaps longer than gap (gap ≤ 0
// means 1 s) between consecutive successful acquire completions (OK
// Acquire Ends, across all keys and clients), within the history span: the
// span's start (the earliest Start in h) and end (the latest End) bound the
// first and the last gap. A gap longer than gap counts whole, not only its
// part beyond gap. A history without any successful acquire is unavailable
// for its whole span.
//
// recoveries has one entry per fault, see RecoveryTimes.
func Availability(h History, faults []Fault, gap time.Duration) (unavailable time.Duration, recoveries []time.Duration) {
	if gap <= 0 {
		gap = time.Second
	}
	recoveries, _ = RecoveryTimes(h, faults)
	return TotalGaps(h, gap), recoveries
}

func TotalGaps(h History, gap time.Duration) time.Duration {
	if len(h) == 0 {
		return 0
	}
	start, end := h.Span()
	points := []time.Duration{start}
	points = append(points, grantTimes(h)...)
	points = append(points, end)
	var total time.Duration
	for i := 1; i < len(points); i++ {
		if d := points[i] - points[i-1]; d > gap {
			total += d
		}
	}
	return total
}

// grantTimes returns the End of every OK acquire, sorted.
func grantTimes(h History) []time.Duration {
	var ts []time.Duration
	for _, o := range h {
		if o.Kind == Acquire && o.OK {
			ts = append(ts, o.End)
		}
	}
	sort.Slice(ts, func(i, j int) bool { return ts[i] < ts[j] })
	return ts
}

// RecoveryTimes returns, for each fault, the time from its Heal to the first
// successful acquire completion (OK Acquire End) at or after Heal, and
// whether there was one. For a fault with no such acquire the duration is
// from Heal to the end of the history (the latest End; 0 if Heal is later):
// a lower bound, and recovered is false.
func RecoveryTimes(h History, faults []Fault) (recoveries []time.Duration, recovered []bool) {
	ts := grantTimes(h)
	_, end := h.Span()
	recoveries = make([]time.Duration, len(faults))
	recovered = make([]bool, len(faults))
	for i, f := range faults {
		j := sort.Search(len(ts), func(j int) bool { return ts[j] >= f.Heal })
		if j < len(ts) {
			recoveries[i], recovered[i] = ts[j]-f.Heal, true
			continue
		}
		recoveries[i] = max(0, end-f.Heal)
	}
	return recoveries, recovered
}
