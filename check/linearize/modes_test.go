package linearize

import (
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
	"github.com/lockgate/lockgate/lock"
)

// shr marks an acquire as a shared hold (a read lock).
func shr(o check.Op) check.Op {
	o.Shared = true
	return o
}

// permit marks an acquire as one of n permits of a semaphore.
func permit(n int, o check.Op) check.Op {
	o.Shared, o.Permits = true, n
	return o
}

// TestOverlapsModes: shared holders coexist, an exclusive holder coexists
// with nobody, and a semaphore's holders never outnumber its permits.
func TestOverlapsModes(t *testing.T) {
	cases := []struct {
		name       string
		h          check.History
		want       int
		wantExcess int
	}{
		{"readers together", H(
			shr(Acq(0, "k", 0, 1, 1, 100, 95)), Rel(0, "k", 20, 21, 1),
			shr(Acq(1, "k", 2, 3, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
			shr(Acq(2, "k", 4, 5, 3, 100, 99)), Rel(2, "k", 25, 26, 3),
		), 0, 0},
		{"writer after the readers", H(
			shr(Acq(0, "k", 0, 1, 1, 100, 95)), Rel(0, "k", 20, 21, 1),
			shr(Acq(1, "k", 2, 3, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
			Acq(2, "k", 4, 32, 3, 100, 99), Rel(2, "k", 40, 41, 3),
			shr(Acq(0, "k", 35, 42, 4, 100, 130)), Rel(0, "k", 50, 51, 4),
		), 0, 0},
		{"writer among readers", H(
			shr(Acq(0, "k", 0, 1, 1, 100, 95)), Rel(0, "k", 20, 21, 1),
			shr(Acq(1, "k", 2, 3, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
			Acq(2, "k", 4, 25, 3, 100, 99), Rel(2, "k", 40, 41, 3), // granted while client 1 reads
		), 1, 0},
		{"reader during a write", H(
			Acq(0, "k", 0, 1, 1, 100, 95), Rel(0, "k", 20, 21, 1),
			shr(Acq(1, "k", 2, 10, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
			shr(Acq(2, "k", 4, 11, 3, 100, 99)), Rel(2, "k", 40, 41, 3),
		), 2, 0},
		{"two permits of two", H(
			permit(2, Acq(0, "k", 0, 1, 1, 100, 95)), Rel(0, "k", 20, 21, 1),
			permit(2, Acq(1, "k", 2, 3, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
			permit(2, Acq(2, "k", 4, 22, 3, 100, 99)), Rel(2, "k", 40, 41, 3), // after client 0's release
		), 0, 0},
		{"three permits of two", H(
			permit(2, Acq(0, "k", 0, 1, 1, 100, 95)), Rel(0, "k", 20, 21, 1),
			permit(2, Acq(1, "k", 2, 3, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
			permit(2, Acq(2, "k", 4, 5, 3, 100, 99)), Rel(2, "k", 40, 41, 3),
		), 1, 1},
		{"a permit past its deadline is no holder", H(
			permit(1, Acq(0, "k", 0, 1, 1, 10, 9)),
			permit(1, Acq(1, "k", 2, 12, 2, 100, 97)), Rel(1, "k", 30, 31, 2),
		), 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ex := check.Overlaps(tc.h)
			if n != tc.want || (n > 0) != (len(ex) > 0) {
				t.Errorf("Overlaps = %d %q, want %d", n, ex, tc.want)
			}
			r := Check(tc.h, nil, check.Options{})
			if r.Overlaps != tc.want || r.PermitExcess != tc.wantExcess {
				t.Errorf("Check: overlaps %d, permit excess %d; want %d, %d", r.Overlaps, r.PermitExcess, tc.want, tc.wantExcess)
			}
			if tc.wantExcess > 0 && !strings.Contains(strings.Join(r.OverlapExamples, "\n"), "semaphore of 2") {
				t.Errorf("examples %q do not name the semaphore", r.OverlapExamples)
			}
		})
	}
}

// TestModeTokens: an exclusive grant's token is above every shared grant's
// received before it and the other way round; a grant received after its
// own deadline is not judged.
func TestModeTokens(t *testing.T) {
	cases := []struct {
		name string
		h    check.History
		want int
	}{
		{"readers, writer, readers", H(
			shr(Acq(0, "k", 0, 2, 2, 100, 95)), shr(Acq(1, "k", 0, 1, 1, 100, 95)), // received out of token order: fine
			Acq(2, "k", 3, 30, 3, 100, 99),
			shr(Acq(0, "k", 31, 40, 5, 100, 130)), shr(Acq(1, "k", 31, 39, 4, 100, 130)),
		), 0},
		{"writer's token below an earlier reader's", H(
			shr(Acq(0, "k", 0, 2, 7, 100, 95)),
			Acq(2, "k", 3, 30, 3, 100, 99),
		), 1},
		{"reader's token below an earlier writer's", H(
			Acq(2, "k", 0, 1, 3, 100, 99),
			shr(Acq(0, "k", 2, 30, 2, 100, 95)),
		), 1},
		{"writer's token equal to a reader's", H(
			shr(Acq(0, "k", 0, 2, 3, 100, 95)),
			Acq(2, "k", 3, 30, 3, 100, 99),
		), 1},
		{"answer after the deadline", H(
			shr(Acq(0, "k", 0, 2, 7, 100, 95)),
			Acq(2, "k", 3, 130, 3, 100, 99), // its lease had run out before it arrived
		), 0},
		{"mutex only: not this check's", H(
			Acq(0, "k", 0, 2, 7, 100, 95),
			Acq(2, "k", 3, 30, 3, 100, 99),
		), 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ex := check.ModeTokens(tc.h, 0)
			if n != tc.want || len(ex) != n {
				t.Errorf("ModeTokens = %d %q, want %d", n, ex, tc.want)
			}
			if r := Check(tc.h, nil, check.Options{}); r.ModeTokenViolations != tc.want {
				t.Errorf("Check: mode token violations %d, want %d", r.ModeTokenViolations, tc.want)
			}
		})
	}
}

// TestCheckSharedKeysLeftOutOfLinearizability: a valid read-lock history,
// which the mutex model would reject, leaves its key out of the search and
// counts it; the mutex keys are still searched.
func TestCheckSharedKeysLeftOutOfLinearizability(t *testing.T) {
	hist := H(
		shr(Acq(0, "r", 0, 1, 1, 100, 95)), shr(Acq(1, "r", 2, 3, 2, 100, 97)), Rel(0, "r", 10, 11, 1), Rel(1, "r", 12, 13, 2),
		Acq(0, "m", 0, 1, 1, 100, 95), Acq(1, "m", 2, 3, 2, 100, 97), // the mutex granted twice
	)
	r := Check(hist, nil, check.Options{})
	if r.SharedKeys != 1 || len(r.LinearizabilityKeys) != 1 || r.LinearizabilityKeys[0].Key != "m" || r.Linearizable {
		t.Errorf("shared keys %d, searched %+v, linearizable %v; want 1, only m, false", r.SharedKeys, r.LinearizabilityKeys, r.Linearizable)
	}
	if r.Overlaps != 1 {
		t.Errorf("overlaps %d %q, want 1 (the mutex's)", r.Overlaps, r.OverlapExamples)
	}
}

// TestCheckHistoryModes: a test's holds with modes — shared holds together
// are accepted; an exclusive one among them, a permit too many, and a
// writer's token below a reader's are rejected.
func TestCheckHistoryModes(t *testing.T) {
	t0 := time.Now()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	hold := func(holder string, tok lock.Token, from, to int, mode lock.Mode, permits int) check.Hold {
		return check.Hold{Key: "k", Holder: holder, Token: tok, Start: at(from), End: at(to), Mode: mode, Permits: permits}
	}
	cases := []struct {
		name  string
		holds []check.Hold
		want  []check.ViolationKind
	}{
		{"readers then a writer then readers", []check.Hold{
			hold("a", 2, 0, 10, lock.ModeShared, 0), hold("b", 1, 1, 12, lock.ModeShared, 0),
			hold("c", 3, 12, 20, lock.ModeExclusive, 0),
			hold("a", 5, 21, 30, lock.ModeShared, 0), hold("b", 4, 22, 30, lock.ModeShared, 0),
		}, nil},
		{"a writer among readers", []check.Hold{
			hold("a", 1, 0, 10, lock.ModeShared, 0), hold("c", 2, 5, 20, lock.ModeExclusive, 0),
		}, []check.ViolationKind{check.Overlap}},
		{"permits", []check.Hold{
			hold("a", 1, 0, 10, lock.ModeShared, 2), hold("b", 2, 1, 10, lock.ModeShared, 2), hold("c", 3, 2, 10, lock.ModeShared, 2),
		}, []check.ViolationKind{check.PermitsExceeded}},
		{"writer's token below a reader's", []check.Hold{
			hold("a", 1, 0, 10, lock.ModeShared, 0), hold("b", 4, 1, 10, lock.ModeShared, 0),
			hold("c", 3, 12, 20, lock.ModeExclusive, 0),
		}, []check.ViolationKind{check.TokenRegression}},
		{"reader's token below the writer's", []check.Hold{
			hold("c", 3, 0, 10, lock.ModeExclusive, 0), hold("a", 2, 12, 20, lock.ModeShared, 0),
		}, []check.ViolationKind{check.TokenRegression}},
		{"two readers with one token", []check.Hold{
			hold("a", 3, 0, 10, lock.ModeShared, 0), hold("b", 3, 1, 10, lock.ModeShared, 0),
		}, []check.ViolationKind{check.TokenRepeat}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := check.CheckHistory(tc.holds)
			var got []check.ViolationKind
			for _, v := range vs {
				got = append(got, v.Kind)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("violations %v, want %v", vs, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Fatalf("violations %v, want %v", vs, tc.want)
				}
			}
		})
	}
}
