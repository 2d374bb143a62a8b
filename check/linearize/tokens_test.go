package linearize

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		name                 string
		h                    check.History
		reused, regressions  int
		exampleMentionsToken string
	}{
		{"empty", nil, 0, 0, ""},
		{"increasing with gaps", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), Acq(1, "k", 5, 6, 4, 1000, 900), Acq(0, "k", 7, 8, 9, 1000, 900),
		), 0, 0, ""},
		{"keys are independent", H(
			Acq(0, "a", 0, 1, 5, 1000, 900), Acq(1, "b", 2, 3, 1, 1000, 900), Acq(1, "b", 4, 5, 5, 1000, 900),
		), 0, 0, ""},
		{"failed and unknown acquires carry no token", H(
			Acq(0, "k", 0, 1, 3, 1000, 900), AcqFail(1, "k", 2, 3, 1000), AcqUnknown(2, "k", 4, 5, 1000),
			Acq(1, "k", 6, 7, 4, 1000, 900),
		), 0, 0, ""},
		{"concurrent grants are not ordered", H(
			Acq(0, "k", 0, 10, 7, 1000, 900), Acq(1, "k", 5, 20, 6, 1000, 900),
		), 0, 0, ""},
		{"reused after a restart", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), Acq(1, "k", 5, 6, 2, 1000, 900),
			Acq(0, "k", 10, 11, 1, 1000, 900), Acq(1, "k", 12, 13, 2, 1000, 900),
		), 2, 1, "token 1"}, // the second repeat equals the highest earlier token: a reuse, not a regression
		{"reused by concurrent grants", H(
			Acq(0, "k", 0, 10, 7, 1000, 900), Acq(1, "k", 5, 20, 7, 1000, 900),
		), 1, 0, "token 7"},
		{"regression", H(
			Acq(0, "k", 0, 1, 5, 1000, 900), Acq(1, "k", 2, 3, 4, 1000, 900), Acq(2, "k", 4, 5, 6, 1000, 900),
		), 0, 1, "token 4"},
		{"regression behind the highest earlier grant", H(
			Acq(0, "k", 0, 1, 9, 1000, 900), Acq(1, "k", 2, 3, 10, 1000, 900), Acq(2, "k", 4, 5, 8, 1000, 900),
		), 0, 1, "after token 10"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			reused, regressions, ex := check.Tokens(tc.h, 0)
			if reused != tc.reused || regressions != tc.regressions {
				t.Fatalf("reused %d, regressions %d, want %d, %d (%q)", reused, regressions, tc.reused, tc.regressions, ex)
			}
			if tc.exampleMentionsToken != "" && (len(ex) == 0 || !strings.Contains(strings.Join(ex, "\n"), tc.exampleMentionsToken)) {
				t.Errorf("examples %q do not mention %q", ex, tc.exampleMentionsToken)
			}
			r := Check(tc.h, nil, check.Options{})
			if !r.TokensChecked || r.TokensReused != reused || r.TokenRegressions != regressions {
				t.Errorf("Check: checked %v, reused %d, regressions %d", r.TokensChecked, r.TokensReused, r.TokenRegressions)
			}
			if r := Check(tc.h, nil, check.Options{NoTokens: true}); r.TokensChecked || r.TokensReused != 0 || r.TokenRegressions != 0 {
				t.Errorf("NoTokens: checked %v, reused %d, regressions %d", r.TokensChecked, r.TokensReused, r.TokenRegressions)
			}
		})
	}
}

// TestLinearizabilityByKey: an illegal key is named on its own, the other
// keys stay Ok; a key whose search has no time left is Unknown and
// counted, and the verdict is Unknown, not Illegal.
func TestLinearizabilityByKey(t *testing.T) {
	hist := H(
		Acq(0, "a", 0, 1, 1, 1000, 900), Rel(0, "a", 5, 6, 1),
		Acq(1, "b", 0, 1, 1, 1000, 900), Acq(2, "b", 5, 6, 2, 1000, 900), // b granted twice
		Acq(2, "c", 0, 1, 1, 1000, 900), Rel(2, "c", 5, 6, 1),
	)
	r := Check(hist, nil, check.Options{})
	if r.Linearizable || r.LinearizabilityResult != porcupine.Illegal || r.LinearizabilityUnknownKeys != 0 ||
		!slices.Equal(r.NotOkKeys(), []string{"b"}) || len(r.LinearizabilityKeys) != 3 {
		t.Errorf("linearizable %v (%v), unknown %d, not Ok %v, verdicts %+v", r.Linearizable, r.LinearizabilityResult,
			r.LinearizabilityUnknownKeys, r.NotOkKeys(), r.LinearizabilityKeys)
	}
	// No time at all: every key is Unknown.
	r = Check(hist, nil, check.Options{LinearizabilityTimeout: time.Nanosecond})
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

// TestBeliefsOfReusedTokens: a client granted the same token twice (a lock
// that reuses tokens) believes it holds each grant until that grant's own
// release, not the first one's, and no overlap is made up; the reuse is
// the token check's to report.
func TestBeliefsOfReusedTokens(t *testing.T) {
	hist := H(
		Acq(0, "k", 0, 1, 1, 1000, 900), Wr(0, "k", 2, 3, 1, true, 1), Rel(0, "k", 5, 6, 1),
		Acq(1, "k", 7, 8, 2, 1000, 900), Rel(1, "k", 9, 10, 2),
		Acq(0, "k", 11, 12, 1, 1000, 900), Wr(0, "k", 13, 14, 1, true, 2), Rel(0, "k", 15, 16, 1),
		Acq(1, "k", 17, 18, 2, 1000, 900), Rel(1, "k", 19, 20, 2),
	)
	want := []check.Belief{
		{Client: 0, Key: "k", Token: 1, Start: D(1), End: D(5)},
		{Client: 1, Key: "k", Token: 2, Start: D(8), End: D(9)},
		{Client: 0, Key: "k", Token: 1, Start: D(12), End: D(15)},
		{Client: 1, Key: "k", Token: 2, Start: D(18), End: D(19)},
	}
	if got := check.Beliefs(hist); !slices.Equal(got, want) {
		t.Errorf("beliefs\n%v, want\n%v", got, want)
	}
	r := Check(hist, nil, check.Options{})
	if r.Overlaps != 0 || r.TokensReused != 2 {
		t.Errorf("overlaps %d %q, tokens reused %d; want 0, 2", r.Overlaps, r.OverlapExamples, r.TokensReused)
	}
}
