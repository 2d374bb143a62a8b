package check_test

import (
	"math/rand/v2"
	"slices"
	"sort"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

// TestCountOverlapsMatchesSweep: the counting overlap check agrees with
// the pair-by-pair sweep of CheckHistory on random beliefs, with many
// overlaps, same-client ones, unbounded ones, ties, and shared beliefs
// (which conflict with exclusive ones only).
func TestCountOverlapsMatchesSweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 300 {
		n := 1 + rng.IntN(60)
		bs := make([]check.Belief, n)
		for i := range bs {
			start := time.Duration(rng.IntN(100))
			end := start + time.Duration(1+rng.IntN(30))
			if rng.IntN(20) == 0 {
				end = check.Forever
			}
			bs[i] = check.Belief{Client: rng.IntN(5), Start: start, End: end, Shared: round%3 != 0 && rng.IntN(2) == 0}
		}
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].Start < bs[j].Start })
		var want [][2]int
		check.Sweep(bs, func(a, b int) {
			if bs[a].Client != bs[b].Client {
				want = append(want, [2]int{a, b})
			}
		}, nil)
		var got [][2]int
		n2, _ := check.CountOverlaps(bs, func(a, b int) bool { got = append(got, [2]int{a, b}); return true }, nil)
		if n2 != len(want) || !slices.Equal(got, want) {
			t.Fatalf("round %d: count %d, pairs %v; sweep found %d: %v", round, n2, got, len(want), want)
		}
		if n3, _ := check.CountOverlaps(bs, func(a, b int) bool { return false }, nil); n3 != n2 {
			t.Fatalf("round %d: %d without examples, %d with", round, n3, n2)
		}
	}
}

func TestAvailabilityByKind(t *testing.T) {
	s := float64(time.Second / Ms)
	hist := H(
		Acq(0, "a", 0, 0.1*s, 1, s, s),
		Acq(1, "a", 0.9*s, 2.5*s, 2, s, s), // requested before the kill: not a lock-delay sample
		Acq(2, "b", 1.5*s, 3*s, 1, s, s),   // the first grant requested after the kill
		Acq(3, "c", 4.2*s, 4.3*s, 1, s, s),
		Acq(0, "a", 6*s, 8*s, 3, s, s),
		AcqFail(1, "b", 9*s, 10*s, s),
	)
	faults := []check.Fault{
		{Name: "kill", Start: D(1 * s), Heal: D(2 * s)},
		{Name: "pause", Start: D(4 * s), Heal: D(4.1 * s)},
		{Name: "kill", Start: D(5 * s), Heal: D(7 * s)},
		{Name: "kill", Start: D(9 * s), Heal: D(9.5 * s)}, // nothing after it
	}
	got := check.AvailabilityByKind(hist, faults)
	want := []check.KindAvailability{
		// to grant: 2 s, 3 s, 1 s (10 − 9, unserved); recovery: 0.5 s, 1 s, 0.5 s (unrecovered)
		{Fault: "kill", Count: 3, ToGrantMedian: D(2 * s), ToGrantMax: D(3 * s), RecoveryMedian: D(0.5 * s), RecoveryMax: D(1 * s),
			Unserved: 1, Unrecovered: 1},
		{Fault: "pause", Count: 1, ToGrantMedian: D(0.3 * s), ToGrantMax: D(0.3 * s), RecoveryMedian: D(0.2 * s), RecoveryMax: D(0.2 * s)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}
