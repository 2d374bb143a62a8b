package linearize

import (
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

// rd is an answered read of key by client c over [start, end] ms that was
// shown the holders' tokens (none: free).
func rd(c int, key string, start, end float64, holders ...uint64) check.Op {
	return check.Op{Client: c, Key: key, Kind: check.Read, Start: D(start), End: D(end), OK: true, Holders: holders}
}

func TestLinearizableReads(t *testing.T) {
	cases := []struct {
		name string
		h    check.History
		want bool
	}{
		{"reads of the holder and of the free key", H(
			rd(2, "k", 0, 1),
			Acq(0, "k", 2, 3, 1, 1000, 900), rd(2, "k", 4, 5, 1), rd(0, "k", 4, 6, 1),
			Rel(0, "k", 7, 8, 1), rd(2, "k", 9, 10),
		), true},
		{"a read concurrent with a release may see either", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			Rel(0, "k", 5, 10, 1), rd(1, "k", 6, 7), rd(2, "k", 6, 8, 1),
		), true},
		{"a read concurrent with a grant may see its token", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), Rel(0, "k", 2, 3, 1),
			Acq(1, "k", 4, 10, 2, 1000, 900), rd(2, "k", 5, 6, 2),
		), true},
		{"a read may see free once the holder's lease may have expired", H(
			Acq(0, "k", 0, 1, 1, 100, 90), rd(1, "k", 150, 151),
		), true},
		{"a read may see the holder past its earliest expiry", H(
			Acq(0, "k", 0, 1, 1, 100, 90), rd(1, "k", 150, 151, 1),
		), true},
		{"a read that saw free ends the lease for later reads", H(
			Acq(0, "k", 0, 1, 1, 100, 90), rd(1, "k", 150, 151), rd(1, "k", 152, 153, 1),
		), false},
		{"a released lease's token read after the release completed", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), Rel(0, "k", 2, 3, 1), rd(1, "k", 4, 5, 1),
		), false},
		{"free read while a grant's lease is certainly live", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), rd(1, "k", 5, 6),
		), false},
		{"free read just before the earliest expiry", H(
			Acq(0, "k", 0, 1, 1, 100, 90), rd(1, "k", 50, 96), // expiry ≥ 100 − drift(3 ms) = 97
		), false},
		{"an old token read after a newer grant completed", H(
			Acq(0, "k", 0, 1, 1, 100, 90),
			Acq(1, "k", 50, 150, 2, 1000, 900),
			rd(2, "k", 160, 161, 1),
		), false},
		{"an old token read after a newer one was read", H(
			Acq(0, "k", 0, 1, 1, 100, 90),
			Acq(1, "k", 50, 300, 2, 1000, 900),
			rd(2, "k", 160, 161, 2), rd(2, "k", 162, 163, 1),
		), false},
		{"a mutex shown with two holders", H(
			Acq(0, "k", 0, 1, 1, 1000, 900), Rel(0, "k", 2, 3, 1),
			Acq(1, "k", 4, 5, 2, 1000, 900), rd(2, "k", 6, 7, 1, 2),
		), false},
		{"failed and unknown reads tell nothing", H(
			Acq(0, "k", 0, 1, 1, 1000, 900),
			check.Op{Client: 1, Key: "k", Kind: check.Read, Start: D(2), End: D(3)},
			check.Op{Client: 1, Key: "k", Kind: check.Read, Start: D(4), End: D(5), Unknown: true, Holders: []uint64{7}},
		), true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for _, keep := range []bool{false, true} {
				got := porcupine.CheckOperationsTimeout(lockModel, operations(tc.h, nil, keep), 5*time.Second)
				if want := map[bool]porcupine.CheckResult{true: porcupine.Ok, false: porcupine.Illegal}[tc.want]; got != want {
					t.Errorf("unpruned %v: %v, want %v", keep, got, want)
				}
			}
		})
	}
}

func TestReadPhantoms(t *testing.T) {
	cases := []struct {
		name                  string
		h                     check.History
		phantoms, unexplained int
	}{
		{"no phantom", H(Acq(0, "k", 0, 1, 5, 1000, 900), rd(1, "k", 2, 3, 5), Rel(0, "k", 3, 3.5, 5), rd(1, "k", 4, 5)), 0, 0},
		{"a token no acquire could have produced", H(
			Acq(0, "k", 0, 1, 5, 1000, 900), Rel(0, "k", 2, 3, 5), rd(1, "k", 4, 5, 6),
		), 1, 1},
		{"the token of an unknown acquire", H(
			Acq(0, "k", 0, 1, 5, 1000, 900), Rel(0, "k", 2, 3, 5),
			AcqUnknown(2, "k", 3.5, 50, 1000), rd(1, "k", 4, 5, 6), rd(1, "k", 6, 7, 6),
		), 2, 0},
		{"an unknown acquire that started after the read ended", H(
			Acq(0, "k", 0, 1, 5, 1000, 900), Rel(0, "k", 2, 3, 5),
			rd(1, "k", 4, 5, 6), AcqUnknown(2, "k", 6, 50, 1000),
		), 1, 1},
		{"a token below a grant returned before the unknown acquire started", H(
			Acq(0, "k", 0, 1, 9, 1000, 900), Rel(0, "k", 2, 3, 9),
			AcqUnknown(2, "k", 4, 50, 1000), rd(1, "k", 5, 6, 7),
		), 1, 1},
		{"one re-sent acquire explains the grants of its attempts", H(
			AcqUnknown(2, "k", 0, 50, 1000), rd(1, "k", 5, 6, 7), rd(1, "k", 10, 11, 8),
		), 2, 0},
		{"an earlier attempt of an acquire granted later", H(
			Acq(0, "k", 0, 10, 9, 1000, 900), rd(1, "k", 2, 3, 7),
		), 1, 0},
		{"an earlier attempt cannot carry the token of its own grant's successor", H(
			Acq(0, "k", 0, 10, 9, 1000, 900), rd(1, "k", 2, 3, 11),
		), 1, 1},
		{"a phantom read after a higher token's grant returned", H(
			Acq(0, "k", 0, 1, 9, 1000, 900), AcqUnknown(2, "k", 0.5, 50, 1000), rd(1, "k", 5, 6, 7),
		), 1, 1},
		{"two tokens, two unknown acquires, assigned the one way that works", H(
			AcqUnknown(2, "k", 0, 50, 1000), AcqUnknown(3, "k", 3, 50, 1000),
			rd(1, "k", 1, 2, 8), // only the first can explain 8
			rd(1, "k", 5, 6, 7), // either can explain 7, and the first is taken
		), 2, 0},
		{"unknown acquires of another key explain nothing", H(
			AcqUnknown(2, "j", 0, 50, 1000), rd(1, "k", 5, 6, 7),
		), 1, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			st := ReadPhantoms(tc.h, 0)
			if st.Phantoms != tc.phantoms || st.Unexplained != tc.unexplained {
				t.Errorf("%d phantoms, %d unexplained (%q), want %d and %d", st.Phantoms, st.Unexplained, st.Examples, tc.phantoms, tc.unexplained)
			}
			if tc.unexplained > 0 && len(st.Examples) == 0 {
				t.Error("no example")
			}
			// Phantom reads are left out of the search: they never
			// make a history that is otherwise legal illegal.
			if res, _ := LinearizabilityCheck(tc.h, check.Options{}); res != porcupine.Ok {
				t.Errorf("search: %v", res)
			}
		})
	}
	// Check reports them, and skips them when the tokens are not the
	// backend's.
	h := H(Acq(0, "k", 0, 1, 5, 1000, 900), Rel(0, "k", 2, 3, 5), rd(1, "k", 4, 5, 6), rd(1, "k", 6, 7))
	if r := Check(h, nil, check.Options{}); r.Reads.Reads != 2 || r.Reads.Unexplained != 1 || !r.Linearizable {
		t.Errorf("Check: reads %+v, linearizable %v", r.Reads, r.Linearizable)
	}
	if r := Check(h, nil, check.Options{NoTokens: true}); r.Reads.Reads != 0 || r.Reads.Unexplained != 0 {
		t.Errorf("Check without tokens: reads %+v", r.Reads)
	}
}

// TestReadsIgnoredByOtherCheckers: reads change no other checker's
// verdict: overlaps, tokens, stale writes and availability are those of
// the history without them.
func TestReadsIgnoredByOtherCheckers(t *testing.T) {
	base := H(
		Acq(0, "k", 0, 1, 1, 1000, 900), Wr(0, "k", 1, 2, 1, true, 1), Rel(0, "k", 3, 4, 1),
		Acq(1, "k", 2, 5, 2, 1000, 900), Rel(1, "k", 6, 7, 2),
		Acq(2, "s", 0, 1, 3, 1000, 900),
	)
	base[5].Shared = true
	with := append(check.History{}, base...)
	with = append(with, rd(3, "k", 2, 2.5, 1), rd(3, "k", 8, 9), rd(0, "k", 0.5, 6, 2), rd(3, "s", 2, 3, 3), rd(3, "s", 2, 3, 3, 9))
	faults := []check.Fault{{Name: "f", Start: D(1), Heal: D(2)}}
	a, b := Check(base, faults, check.Options{}), Check(with, faults, check.Options{})
	if a.Overlaps != b.Overlaps || a.TokensReused != b.TokensReused || a.TokenRegressions != b.TokenRegressions ||
		a.ModeTokenViolations != b.ModeTokenViolations || a.StaleWritesAccepted != b.StaleWritesAccepted ||
		a.StaleWritesRejected != b.StaleWritesRejected || a.SharedKeys != b.SharedKeys || !b.Linearizable ||
		a.Recoveries[0] != b.Recoveries[0] {
		t.Errorf("without reads %+v\nwith reads %+v", a, b)
	}
	if b.Reads.Reads != 5 || b.Reads.Unexplained != 1 {
		t.Errorf("reads: %+v", b.Reads)
	}
}
