package soak

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Point is one sample of one metric of one node: seconds since the run
// started, the value, and the process it was read from (a restarted node
// is a new process, with a new series: its heap and goroutines start
// again from nothing).
type Point struct {
	T   float64 `json:"t"`
	V   float64 `json:"v"`
	PID int     `json:"pid"`
}

// Fit is what FitGrowth found in one node's series of one metric.
type Fit struct {
	// Points and Segments are the samples and process lifetimes the slope
	// was fitted over (after the warm-up and each restart's settling).
	Points   int `json:"points"`
	Segments int `json:"segments"`
	// WarmMedian is the median of the warm-up's samples (0 when the
	// warm-up has none); Median that of the fitted samples, the level the
	// growth is a fraction of; End the last sample; Max the largest
	// fitted sample (what a cap is judged on).
	WarmMedian float64 `json:"warmupMedian"`
	Median     float64 `json:"median"`
	End        float64 `json:"end"`
	Max        float64 `json:"max"`
	// SlopePerHour is the least-squares growth per hour, pooled over the
	// process lifetimes: each lifetime is centred on its own mean, so a
	// restart's drop (or a fresh process's level) is no growth, and only
	// the change within each lifetime counts.
	SlopePerHour float64 `json:"slopePerHour"`
	// FracPerHour is SlopePerHour as a fraction of Median.
	FracPerHour float64 `json:"fracPerHour"`
}

// FitGrowth fits pts (in time order) after the warm-up: samples before
// warmup seconds are the warm-up; each later restart (a new PID) starts a
// new lifetime, whose first settle seconds are dropped too (a fresh
// process replays its log and takes its clients back: that is its own
// warm-up, not growth). The first process's lifetime is settled by the
// warm-up. Lifetimes with fewer than two samples left add nothing. ok is
// false when fewer than minPoints samples, or no spread in time, remain.
func FitGrowth(pts []Point, warmup, settle float64, minPoints int) (f Fit, ok bool) {
	var warm, kept []float64
	type seg struct{ ts, vs []float64 }
	var segs []*seg
	first := -1 // the PID of the process that ran when the run started
	start := map[int]float64{}
	var cur *seg
	curPID := -1
	for i, p := range pts {
		if i == 0 {
			first = p.PID
		}
		if _, seen := start[p.PID]; !seen {
			start[p.PID] = p.T
		}
		if i == len(pts)-1 {
			f.End = p.V
		}
		if p.T < warmup {
			warm = append(warm, p.V)
			continue
		}
		if p.PID != first && p.T < start[p.PID]+settle {
			continue
		}
		if cur == nil || p.PID != curPID {
			cur, curPID = &seg{}, p.PID
			segs = append(segs, cur)
		}
		cur.ts = append(cur.ts, p.T)
		cur.vs = append(cur.vs, p.V)
		kept = append(kept, p.V)
	}
	f.WarmMedian = median(warm)
	f.Median = median(kept)
	if len(kept) > 0 {
		f.Max = slices.Max(kept)
	}
	var sxy, sxx float64
	for _, s := range segs {
		if len(s.ts) < 2 {
			continue
		}
		f.Segments++
		f.Points += len(s.ts)
		mt, mv := mean(s.ts), mean(s.vs)
		for i := range s.ts {
			sxy += (s.ts[i] - mt) * (s.vs[i] - mv)
			sxx += (s.ts[i] - mt) * (s.ts[i] - mt)
		}
	}
	if f.Points < max(minPoints, 2) || sxx == 0 {
		return f, false
	}
	f.SlopePerHour = sxy / sxx * 3600
	if f.Median != 0 {
		f.FracPerHour = f.SlopePerHour / math.Abs(f.Median)
	}
	return f, true
}

func mean(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s / float64(len(xs))
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 1 {
		return s[n/2]
	} else {
		return (s[n/2-1] + s[n/2]) / 2
	}
}

// Bound is what a metric may do over the fitted window: grow by at most
// Frac of its median per hour or Abs per hour, whichever is larger
// (Cap false), or never exceed Abs (Cap true: the on-disk metrics, whose
// raft-wal segments are preallocated, so that they move in steps, not
// along a slope).
type Bound struct {
	Cap  bool    `json:"cap"`
	Frac float64 `json:"fracPerHour,omitempty"`
	Abs  float64 `json:"abs"`
}

// Limit is the bound's figure for a fit: the growth per hour allowed, or
// the cap.
func (b Bound) Limit(f Fit) float64 {
	if b.Cap {
		return b.Abs
	}
	return max(b.Frac*math.Abs(f.Median), b.Abs)
}

// Judge says whether f is within b, and if not why.
func (b Bound) Judge(f Fit) (bool, string) {
	lim := b.Limit(f)
	if b.Cap {
		if f.Max > lim {
			return false, fmt.Sprintf("reached %s, above its cap of %s", fmtNum(f.Max), fmtNum(lim))
		}
		return true, ""
	}
	if f.SlopePerHour > lim {
		return false, fmt.Sprintf("grows %s/h (%.1f %% of its median %s per hour), above the %s/h allowed",
			fmtNum(f.SlopePerHour), 100*f.FracPerHour, fmtNum(f.Median), fmtNum(lim))
	}
	return true, ""
}

// String writes the bound as ParseBound reads it.
func (b Bound) String() string {
	if b.Cap || b.Frac == 0 {
		return fmtNum(b.Abs)
	}
	return strconv.FormatFloat(100*b.Frac, 'f', -1, 64) + "%:" + fmtNum(b.Abs)
}

// ParseBound reads a bound: "10%:16MiB" (growth of at most 10 % of the
// median or 16 MiB per hour, whichever is larger), "5%" (the fraction
// alone), "16MiB" or "20" (an absolute growth per hour); for a capped
// metric, the cap alone ("192MiB", "200000").
func ParseBound(s string, capped bool) (Bound, error) {
	b := Bound{Cap: capped}
	frac, abs, hasAbs := strings.Cut(s, ":")
	if !strings.HasSuffix(frac, "%") {
		if hasAbs {
			return b, fmt.Errorf("bound %q: want P%%:N, P%% or N", s)
		}
		frac, abs, hasAbs = "", frac, true
	}
	if frac != "" {
		if capped {
			return b, fmt.Errorf("bound %q: a capped metric takes a size or count, not a fraction", s)
		}
		p, err := strconv.ParseFloat(strings.TrimSuffix(frac, "%"), 64)
		if err != nil || p < 0 {
			return b, fmt.Errorf("bound %q: bad percentage", s)
		}
		b.Frac = p / 100
	}
	if hasAbs {
		v, err := parseSize(abs)
		if err != nil {
			return b, fmt.Errorf("bound %q: %v", s, err)
		}
		b.Abs = v
	}
	return b, nil
}

var units = []struct {
	suffix string
	mul    float64
}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}}

// parseSize reads "16MiB", "512KiB", "1.5GiB" or a plain number.
func parseSize(s string) (float64, error) {
	mul := 1.0
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mul = strings.TrimSuffix(s, u.suffix), u.mul
			break
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v < 0 {
		return 0, fmt.Errorf("bad size or count %q", s)
	}
	return v * mul, nil
}

// fmtNum writes a count plainly and a byte figure (≥ 1 MiB) in MiB.
func fmtNum(v float64) string {
	if math.Abs(v) >= 1<<20 {
		return strconv.FormatFloat(v/(1<<20), 'f', 1, 64) + "MiB"
	}
	if v == math.Trunc(v) {
		return strconv.FormatFloat(v, 'f', 0, 64)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
