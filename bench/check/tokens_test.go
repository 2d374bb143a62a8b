package check

import (
	"math/rand/v2"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		h                    History
		reused, regressions  int
		exampleMentionsToken string
	}{
		{"empty", nil, 0, 0, ""},
		{"increasing with gaps", h(
			acq(0, "k", 0, 1, 1, 1000, 900), acq(1, "k", 5, 6, 4, 1000, 900), acq(0, "k", 7, 8, 9, 1000, 900),
		), 0, 0, ""},
		{"keys are independent", h(
			acq(0, "a", 0, 1, 5, 1000, 900), acq(1, "b", 2, 3, 1, 1000, 900), acq(1, "b", 4, 5, 5, 1000, 900),
		), 0, 0, ""},
		{"failed and unknown acquires carry no token", h(
			acq(0, "k", 0, 1, 3, 1000, 900), acqFail(1, "k", 2, 3, 1000), acqUnknown(2, "k", 4, 5, 1000),
			acq(1, "k", 6, 7, 4, 1000, 900),
		), 0, 0, ""},
		{"concurrent grants are not ordered", h(
			acq(0, "k", 0, 10, 7, 1000, 900), acq(1, "k", 5, 20, 6, 1000, 900),
		), 0, 0, ""},
		{"reused after a restart", h(
			acq(0, "k", 0, 1, 1, 1000, 900), acq(1, "k", 5, 6, 2, 1000, 900),
			acq(0, "k", 10, 11, 1, 1000, 900), acq(1, "k", 12, 13, 2, 1000, 900),
		), 2, 1, "token 1"}, // the second repeat equals the highest earlier token: a reuse, not a regression
		{"reused by concurrent grants", h(
			acq(0, "k", 0, 10, 7, 1000, 900), acq(1, "k", 5, 20, 7, 1000, 900),
		), 1, 0, "token 7"},
		{"regression", h(
			acq(0, "k", 0, 1, 5, 1000, 900), acq(1, "k", 2, 3, 4, 1000, 900), acq(2, "k", 4, 5, 6, 1000, 900),
		), 0, 1, "token 4"},
		{"regression behind the highest earlier grant", h(
			acq(0, "k", 0, 1, 9, 1000, 900), acq(1, "k", 2, 3, 10, 1000, 900), acq(2, "k", 4, 5, 8, 1000, 900),
		), 0, 1, "after token 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reused, regressions, ex := Tokens(tc.h, 0)
			if reused != tc.reused || regressions != tc.regressions {
				t.Fatalf("reused %d, regressions %d, want %d, %d (%q)", reused, regressions, tc.reused, tc.regressions, ex)
			}
			if tc.exampleMentionsToken != "" && (len(ex) == 0 || !strings.Contains(strings.Join(ex, "\n"), tc.exampleMentionsToken)) {
				t.Errorf("examples %q do not mention %q", ex, tc.exampleMentionsToken)
			}
			r := Check(tc.h, nil, Options{})
			if !r.TokensChecked || r.TokensReused != reused || r.TokenRegressions != regressions {
				t.Errorf("Check: checked %v, reused %d, regressions %d", r.TokensChecked, r.TokensReused, r.TokenRegressions)
			}
			if r := Check(tc.h, nil, Options{NoTokens: true}); r.TokensChecked || r.TokensReused != 0 || r.TokenRegressions != 0 {
				t.Errorf("NoTokens: checked %v, reused %d, regressions %d", r.TokensChecked, r.TokensReused, r.TokenRegressions)
			}
		})
	}
}

// TestCountOverlapsMatchesSweep: the counting overlap check agrees with
// the pair-by-pair sweep of CheckHistory on random beliefs, with many
// overlaps, same-client ones, unbounded ones, ties, and shared beliefs
// (which conflict with exclusive ones only).
func TestCountOverlapsMatchesSweep(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 300 {
		n := 1 + rng.IntN(60)
		bs := make([]Belief, n)
		for i := range bs {
			start := time.Duration(rng.IntN(100))
			end := start + time.Duration(1+rng.IntN(30))
			if rng.IntN(20) == 0 {
				end = forever
			}
			bs[i] = Belief{Client: rng.IntN(5), Start: start, End: end, Shared: round%3 != 0 && rng.IntN(2) == 0}
		}
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].Start < bs[j].Start })
		var want [][2]int
		sweep(bs, func(a, b int) {
			if bs[a].Client != bs[b].Client {
				want = append(want, [2]int{a, b})
			}
		}, nil)
		var got [][2]int
		n2, _ := countOverlaps(bs, func(a, b int) bool { got = append(got, [2]int{a, b}); return true }, nil)
		if n2 != len(want) || !slices.Equal(got, want) {
			t.Fatalf("round %d: count %d, pairs %v; sweep found %d: %v", round, n2, got, len(want), want)
		}
		if n3, _ := countOverlaps(bs, func(a, b int) bool { return false }, nil); n3 != n2 {
			t.Fatalf("round %d: %d without examples, %d with", round, n3, n2)
		}
	}
}

// TestLinearizabilityByKey: an illegal key is named on its own, the other
// keys stay Ok; a key whose search has no time left is Unknown and
// counted, and the verdict is Unknown, not Illegal.
func TestLinearizabilityByKey(t *testing.T) {
	hist := h(
		acq(0, "a", 0, 1, 1, 1000, 900), rel(0, "a", 5, 6, 1),
		acq(1, "b", 0, 1, 1, 1000, 900), acq(2, "b", 5, 6, 2, 1000, 900), // b granted twice
		acq(2, "c", 0, 1, 1, 1000, 900), rel(2, "c", 5, 6, 1),
	)
	r := Check(hist, nil, Options{})
	if r.Linearizable || r.LinearizabilityResult != porcupine.Illegal || r.LinearizabilityUnknownKeys != 0 ||
		!slices.Equal(r.NotOkKeys(), []string{"b"}) || len(r.LinearizabilityKeys) != 3 {
		t.Errorf("linearizable %v (%v), unknown %d, not Ok %v, verdicts %+v", r.Linearizable, r.LinearizabilityResult,
			r.LinearizabilityUnknownKeys, r.NotOkKeys(), r.LinearizabilityKeys)
	}
	// No time at all: every key is Unknown.
	r = Check(hist, nil, Options{LinearizabilityTimeout: time.Nanosecond})
	if r.Linearizable || r.LinearizabilityResult != porcupine.Unknown || r.LinearizabilityUnknownKeys != 3 {
		t.Errorf("no time: linearizable %v (%v), unknown %d; want false (Unknown), 3", r.Linearizable, r.LinearizabilityResult, r.LinearizabilityUnknownKeys)
	}
	res, unknown := Verdict([]KeyVerdict{{Result: porcupine.Ok}, {Result: porcupine.Unknown}, {Result: porcupine.Ok}})
	if res != porcupine.Unknown || unknown != 1 {
		t.Errorf("Verdict: %v, %d unknown", res, unknown)
	}
	if res, _ := Verdict([]KeyVerdict{{Result: porcupine.Unknown}, {Result: porcupine.Illegal}}); res != porcupine.Illegal {
		t.Errorf("Verdict with an Illegal key: %v", res)
	}
	if res, _ := Verdict(nil); res != porcupine.Ok {
		t.Errorf("Verdict of nothing: %v", res)
	}
}

func TestAvailabilityByKind(t *testing.T) {
	s := float64(time.Second / ms)
	hist := h(
		acq(0, "a", 0, 0.1*s, 1, s, s),
		acq(1, "a", 0.9*s, 2.5*s, 2, s, s), // requested before the kill: not a lock-delay sample
		acq(2, "b", 1.5*s, 3*s, 1, s, s),   // the first grant requested after the kill
		acq(3, "c", 4.2*s, 4.3*s, 1, s, s),
		acq(0, "a", 6*s, 8*s, 3, s, s),
		acqFail(1, "b", 9*s, 10*s, s),
	)
	faults := []Fault{
		{Name: "kill", Start: d(1 * s), Heal: d(2 * s)},
		{Name: "pause", Start: d(4 * s), Heal: d(4.1 * s)},
		{Name: "kill", Start: d(5 * s), Heal: d(7 * s)},
		{Name: "kill", Start: d(9 * s), Heal: d(9.5 * s)}, // nothing after it
	}
	got := AvailabilityByKind(hist, faults)
	want := []KindAvailability{
		// to grant: 2 s, 3 s, 1 s (10 − 9, unserved); recovery: 0.5 s, 1 s, 0.5 s (unrecovered)
		{Fault: "kill", Count: 3, ToGrantMedian: d(2 * s), ToGrantMax: d(3 * s), RecoveryMedian: d(0.5 * s), RecoveryMax: d(1 * s),
			Unserved: 1, Unrecovered: 1},
		{Fault: "pause", Count: 1, ToGrantMedian: d(0.3 * s), ToGrantMax: d(0.3 * s), RecoveryMedian: d(0.2 * s), RecoveryMax: d(0.2 * s)},
	}
	if !slices.Equal(got, want) {
		t.Errorf("got  %+v\nwant %+v", got, want)
	}
}

// TestBeliefsOfReusedTokens: a client granted the same token twice (a lock
// that reuses tokens) believes it holds each grant until that grant's own
// release, not the first one's, and no overlap is made up; the reuse is
// the token check's to report.
func TestBeliefsOfReusedTokens(t *testing.T) {
	hist := h(
		acq(0, "k", 0, 1, 1, 1000, 900), wr(0, "k", 2, 3, 1, true, 1), rel(0, "k", 5, 6, 1),
		acq(1, "k", 7, 8, 2, 1000, 900), rel(1, "k", 9, 10, 2),
		acq(0, "k", 11, 12, 1, 1000, 900), wr(0, "k", 13, 14, 1, true, 2), rel(0, "k", 15, 16, 1),
		acq(1, "k", 17, 18, 2, 1000, 900), rel(1, "k", 19, 20, 2),
	)
	want := []Belief{
		{Client: 0, Key: "k", Token: 1, Start: d(1), End: d(5)},
		{Client: 1, Key: "k", Token: 2, Start: d(8), End: d(9)},
		{Client: 0, Key: "k", Token: 1, Start: d(12), End: d(15)},
		{Client: 1, Key: "k", Token: 2, Start: d(18), End: d(19)},
	}
	if got := Beliefs(hist); !slices.Equal(got, want) {
		t.Errorf("beliefs\n%v, want\n%v", got, want)
	}
	r := Check(hist, nil, Options{})
	if r.Overlaps != 0 || r.TokensReused != 2 {
		t.Errorf("overlaps %d %q, tokens reused %d; want 0, 2", r.Overlaps, r.OverlapExamples, r.TokensReused)
	}
}
