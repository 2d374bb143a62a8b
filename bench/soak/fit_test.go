package soak

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// hour of samples every 10 s, with a warm-up of 6 minutes.
const (
	testEvery  = 10.0
	testHour   = 3600.0
	testWarmup = 360.0
	testSettle = 60.0
)

// synth is a heap-like series: level, plus slope per hour, plus noise of
// ±noise (uniform), one process throughout unless restarts says when new
// processes start (each from level again).
func synth(seed uint64, level, perHour, noise float64, restarts ...float64) []Point {
	rng := rand.New(rand.NewPCG(seed, 0))
	var pts []Point
	pid, born := 100, 0.0
	for t := 0.0; t <= testHour; t += testEvery {
		for _, r := range restarts {
			if t == r {
				pid, born = pid+1, t
			}
		}
		v := level + perHour*(t-born)/3600 + noise*(2*rng.Float64()-1)
		pts = append(pts, Point{T: t, V: v, PID: pid})
	}
	return pts
}

// TestFitFlatPasses: a flat series with GC-like noise of ±20 % passes the
// heap bound, and its fitted slope is near zero.
func TestFitFlatPasses(t *testing.T) {
	for seed := range uint64(20) {
		pts := synth(seed, 40<<20, 0, 8<<20)
		f, ok := FitGrowth(pts, testWarmup, testSettle, minFitPoints)
		if !ok {
			t.Fatalf("seed %d: no fit", seed)
		}
		if pass, why := DefaultBounds[Heap].Judge(f); !pass {
			t.Errorf("seed %d: a flat series failed: %s", seed, why)
		}
		if math.Abs(f.SlopePerHour) > 4<<20 {
			t.Errorf("seed %d: flat series fitted at %s/h", seed, fmtNum(f.SlopePerHour))
		}
	}
}

// TestFitLeakFails: a heap leaking 48 MiB an hour (above both 10 % of its
// 40 MiB median and 16 MiB) under the same noise fails, and the fit finds
// the slope within 15 %.
func TestFitLeakFails(t *testing.T) {
	for seed := range uint64(20) {
		pts := synth(seed, 40<<20, 48<<20, 8<<20)
		f, ok := FitGrowth(pts, testWarmup, testSettle, minFitPoints)
		if !ok {
			t.Fatalf("seed %d: no fit", seed)
		}
		if pass, _ := DefaultBounds[Heap].Judge(f); pass {
			t.Errorf("seed %d: a leak of 48 MiB/h passed (fitted %s/h)", seed, fmtNum(f.SlopePerHour))
		}
		if got := f.SlopePerHour / (48 << 20); got < 0.85 || got > 1.15 {
			t.Errorf("seed %d: fitted %s/h for 48 MiB/h", seed, fmtNum(f.SlopePerHour))
		}
	}
}

// TestFitGoroutineLeakFails: goroutines growing 10 an hour from 60 (one
// leaked per few hundred connections) fail the goroutines bound; a flat
// 60 ± 6 passes.
func TestFitGoroutineLeakFails(t *testing.T) {
	b := DefaultBounds[Goroutines]
	f, _ := FitGrowth(synth(1, 60, 10, 6), testWarmup, testSettle, minFitPoints)
	if pass, _ := b.Judge(f); pass {
		t.Errorf("10 goroutines/h from 60 passed: %+v", f)
	}
	f, _ = FitGrowth(synth(1, 60, 0, 6), testWarmup, testSettle, minFitPoints)
	if pass, why := b.Judge(f); !pass {
		t.Errorf("flat goroutines failed: %s", why)
	}
}

// TestFitRestartsArePooled: restarts reset the heap. A leak cut into
// lifetimes by restarts is still found (a fit across the restarts would
// see the drops and call it flat); a flat series with restarts, each
// process climbing to its level in its first seconds, still passes.
func TestFitRestartsArePooled(t *testing.T) {
	restarts := []float64{900, 1800, 2700}
	leak := synth(3, 40<<20, 64<<20, 4<<20, restarts...)
	f, ok := FitGrowth(leak, testWarmup, testSettle, minFitPoints)
	if !ok || f.Segments != 4 {
		t.Fatalf("fit %+v ok %v: want 4 lifetimes", f, ok)
	}
	if pass, _ := DefaultBounds[Heap].Judge(f); pass {
		t.Errorf("a leak of 64 MiB/h cut by restarts passed: %s/h", fmtNum(f.SlopePerHour))
	}
	// The same series fitted as one (every point one PID) hides the
	// leak: what the pooling is for.
	one := make([]Point, len(leak))
	for i, p := range leak {
		one[i] = Point{T: p.T, V: p.V, PID: 1}
	}
	if g, _ := FitGrowth(one, testWarmup, testSettle, minFitPoints); g.SlopePerHour > DefaultBounds[Heap].Limit(g) {
		t.Errorf("the unpooled fit saw the leak too (%s/h): the test series does not exercise the pooling", fmtNum(g.SlopePerHour))
	}

	flat := synth(4, 40<<20, 0, 4<<20, restarts...)
	for i, p := range flat {
		for _, r := range restarts {
			if p.T >= r && p.T < r+30 { // a fresh process, still loading
				flat[i].V = p.V / 4
			}
		}
	}
	f, _ = FitGrowth(flat, testWarmup, testSettle, minFitPoints)
	if pass, why := DefaultBounds[Heap].Judge(f); !pass {
		t.Errorf("a flat series with restarts failed: %s", why)
	}
	// Without the settling, the fresh processes' climb reads as growth.
	f, _ = FitGrowth(flat, testWarmup, 0, minFitPoints)
	if pass, _ := DefaultBounds[Heap].Judge(f); pass {
		t.Errorf("the restarts' climbs passed unsettled: the test series does not exercise the settling (%s/h)", fmtNum(f.SlopePerHour))
	}
}

// TestFitTooFewPoints: a series with nothing after the warm-up does not
// fit, and the report fails it.
func TestFitTooFewPoints(t *testing.T) {
	if _, ok := FitGrowth(synth(1, 10, 0, 1)[:30], testWarmup, testSettle, minFitPoints); ok {
		t.Error("a series inside the warm-up fitted")
	}
}

// TestCaps: a disk metric passes under its cap and fails above it.
func TestCaps(t *testing.T) {
	b := DefaultBounds[LogBytes]
	f, _ := FitGrowth(synth(1, 64<<20, 0, 0), testWarmup, testSettle, minFitPoints)
	if pass, why := b.Judge(f); !pass {
		t.Errorf("one segment failed: %s", why)
	}
	f, _ = FitGrowth(synth(1, 64<<20, 300<<20, 0), testWarmup, testSettle, minFitPoints)
	if pass, why := b.Judge(f); pass || !strings.Contains(why, "cap") {
		t.Errorf("a log growing to %s passed: %q", fmtNum(f.Max), why)
	}
}

// TestParseBound: the --bound forms, and their refusals.
func TestParseBound(t *testing.T) {
	for _, c := range []struct {
		in     string
		capped bool
		want   Bound
	}{
		{"10%:16MiB", false, Bound{Frac: 0.10, Abs: 16 << 20}},
		{"5%", false, Bound{Frac: 0.05}},
		{"20", false, Bound{Abs: 20}},
		{"192MiB", true, Bound{Cap: true, Abs: 192 << 20}},
	} {
		got, err := ParseBound(c.in, c.capped)
		if err != nil || got != c.want {
			t.Errorf("ParseBound(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
		if back, err := ParseBound(got.String(), c.capped); err != nil || back != got {
			t.Errorf("%+v.String() = %q reads back as %+v, %v", got, got.String(), back, err)
		}
	}
	for _, in := range []string{"10", "x%", "1:2", "-3"} {
		capped := in == "10"
		if in == "10" {
			in = "10%" // a fraction for a cap
		}
		if _, err := ParseBound(in, capped); err == nil {
			t.Errorf("ParseBound(%q, %v) accepted", in, capped)
		}
	}
}
