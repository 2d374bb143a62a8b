package check_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
	"github.com/lockgate/lockgate/lock"
)

func TestCheckHistory(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	h := func(key, holder string, token lock.Token, start, end int) check.Hold {
		return check.Hold{Key: key, Holder: holder, Token: token, Start: at(start), End: at(end)}
	}
	for _, tc := range []struct {
		name  string
		holds []check.Hold
		want  []check.ViolationKind
	}{
		{"Empty", nil, nil},
		{"OneHold", []check.Hold{h("k", "a", 1, 0, 10)}, nil},
		{"Sequential", []check.Hold{h("k", "a", 1, 0, 10), h("k", "b", 2, 10, 20), h("k", "c", 5, 25, 30)}, nil},
		{"Unsorted", []check.Hold{h("k", "c", 5, 25, 30), h("k", "a", 1, 0, 10), h("k", "b", 2, 11, 20)}, nil},
		{"KeysIndependent", []check.Hold{h("k1", "a", 7, 0, 10), h("k2", "b", 3, 5, 15), h("k1", "c", 8, 10, 12)}, nil},
		{"SameTokenOtherKey", []check.Hold{h("k1", "a", 1, 0, 10), h("k2", "b", 1, 0, 10)}, nil},

		{"Overlap", []check.Hold{h("k", "a", 1, 0, 10), h("k", "b", 2, 9, 20)}, []check.ViolationKind{check.Overlap}},
		{"Contained", []check.Hold{h("k", "a", 1, 0, 100), h("k", "b", 2, 10, 20), h("k", "c", 3, 30, 40)},
			[]check.ViolationKind{check.Overlap, check.Overlap}},
		// Every intersecting pair is a violation, as in Overlaps: b and c
		// overlap each other as well as a.
		{"ThreeAtOnce", []check.Hold{h("k", "a", 1, 0, 100), h("k", "b", 2, 10, 50), h("k", "c", 3, 20, 30)},
			[]check.ViolationKind{check.Overlap, check.Overlap, check.Overlap}},
		{"SameHolder", []check.Hold{h("k", "a", 1, 0, 10), h("k", "a", 2, 5, 15)}, []check.ViolationKind{check.Overlap}},
		{"SameStart", []check.Hold{h("k", "a", 1, 0, 10), h("k", "b", 2, 0, 10)}, []check.ViolationKind{check.Overlap}},
		{"TokenRegression", []check.Hold{h("k", "a", 5, 0, 10), h("k", "b", 4, 10, 20)}, []check.ViolationKind{check.TokenRegression}},
		{"TokenRepeat", []check.Hold{h("k", "a", 5, 0, 10), h("k", "b", 5, 10, 20)}, []check.ViolationKind{check.TokenRepeat}},
		{"RegressionAfterGap", []check.Hold{h("k", "a", 1, 0, 10), h("k", "b", 9, 20, 30), h("k", "c", 3, 40, 50)},
			[]check.ViolationKind{check.TokenRegression}},
		{"OverlapAndRepeat", []check.Hold{h("k", "a", 2, 0, 10), h("k", "b", 2, 5, 15)}, []check.ViolationKind{check.Overlap, check.TokenRepeat}},
		{"EndBeforeStart", []check.Hold{h("k", "a", 1, 10, 0)}, []check.ViolationKind{check.InvalidHold}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.holds)
			vs := check.CheckHistory(in)
			var got []check.ViolationKind
			for _, v := range vs {
				got = append(got, v.Kind)
			}
			if !slices.Equal(got, tc.want) {
				t.Fatalf("CheckHistory = %v, want kinds %v", vs, tc.want)
			}
			if !slices.Equal(in, tc.holds) {
				t.Error("CheckHistory modified its input")
			}
		})
	}
}

// TestCheckHistoryNamesThePair: an overlap names both holds.
func TestCheckHistoryNamesThePair(t *testing.T) {
	t0 := time.Now()
	a := check.Hold{Key: "k", Holder: "a", Token: 1, Start: t0, End: t0.Add(time.Second)}
	b := check.Hold{Key: "k", Holder: "b", Token: 2, Start: t0.Add(time.Millisecond), End: t0.Add(2 * time.Second)}
	vs := check.CheckHistory([]check.Hold{b, a})
	if len(vs) != 1 || vs[0].First.Holder != "a" || vs[0].Second.Holder != "b" {
		t.Fatalf("CheckHistory = %v, want one overlap of a then b", vs)
	}
}

// TestCheckHistoryAgreesWithOverlaps: a test's holds and a campaign's
// history of the same intervals (distinct holders) give the same overlaps:
// one time base, one sweep.
func TestCheckHistoryAgreesWithOverlaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(17, 3))
	t0 := time.Now()
	for round := 0; round < 200; round++ {
		var holds []check.Hold
		var hist check.History
		for c := 0; c < 6; c++ {
			key := fmt.Sprintf("k%d", rng.IntN(2))
			start := rng.IntN(100)
			end := start + 1 + rng.IntN(30)
			tok := lock.Token(c + 1)
			holds = append(holds, check.Hold{Key: key, Holder: fmt.Sprint(c), Token: tok,
				Start: t0.Add(time.Duration(start) * Ms), End: t0.Add(time.Duration(end) * Ms)})
			hist = append(hist,
				Acq(c, key, float64(start)-1, float64(start), uint64(tok), 1000, 1000),
				Rel(c, key, float64(end), float64(end)+1, uint64(tok)))
		}
		var got int
		for _, v := range check.CheckHistory(holds) {
			if v.Kind == check.Overlap {
				got++
			}
		}
		if want, _ := check.Overlaps(hist); got != want {
			t.Fatalf("round %d: CheckHistory found %d overlaps, Overlaps %d, in %v", round, got, want, holds)
		}
	}
}
