package check_test

import (
	"strings"
	"testing"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

func TestOverlaps(t *testing.T) {
	cases := []struct {
		name string
		h    check.History
		want int
	}{
		{"empty", nil, 0},
		{"disjoint holders", H(
			Acq(0, "k", 0, 1, 1, 100, 95), Rel(0, "k", 10, 11, 1),
			Acq(1, "k", 20, 21, 2, 100, 115), Rel(1, "k", 30, 31, 2),
		), 0},
		{"released before the next grant", H(
			Acq(0, "k", 0, 1, 1, 100, 95), Rel(0, "k", 10, 11, 1),
			Acq(1, "k", 5, 12, 2, 100, 100), // waited behind client 0
		), 0},
		{"release sent exactly when the next grant arrived", H(
			Acq(0, "k", 0, 1, 1, 100, 95), Rel(0, "k", 12, 13, 1),
			Acq(1, "k", 5, 12, 2, 100, 100),
		), 0},
		{"next grant after the deadline without release", H(
			Acq(0, "k", 0, 1, 1, 50, 47),
			Acq(1, "k", 2, 60, 2, 50, 99),
		), 0},
		{"holder wrote before its deadline, next grant after it", H(
			Acq(0, "k", 0, 1, 1, 50, 47), Wr(0, "k", 10, 11, 1, true, 1),
			Acq(1, "k", 2, 60, 2, 50, 99),
		), 0},
		{"paused client writes after its deadline while another holds", H(
			Acq(0, "k", 0, 1, 1, 50, 47),
			Acq(1, "k", 2, 60, 2, 50, 99), Wr(1, "k", 61, 62, 2, true, 1),
			WrRejected(0, "k", 70, 71, 1, true), // woke up from a pause: believes it still holds
			Rel(0, "k", 72, 73, 1),
		), 1},
		{"two clients with overlapping grants", H(
			Acq(0, "k", 0, 1, 1, 100, 95), Rel(0, "k", 20, 21, 1),
			Acq(1, "k", 2, 3, 2, 100, 97), Rel(1, "k", 30, 31, 2),
		), 1},
		{"three-way overlap", H(
			Acq(0, "k", 0, 1, 1, 100, 95),
			Acq(1, "k", 2, 3, 2, 100, 97),
			Acq(2, "k", 4, 5, 3, 100, 99),
		), 3},
		{"unknown acquire", H(
			AcqUnknown(0, "k", 0, 100, 100),
			Acq(1, "k", 2, 3, 2, 100, 97), Rel(1, "k", 30, 31, 2),
		), 0},
		{"failed acquire", H(
			AcqFail(0, "k", 0, 10, 100),
			Acq(1, "k", 2, 3, 2, 100, 97), Rel(1, "k", 30, 31, 2),
		), 0},
		{"different keys", H(
			Acq(0, "a", 0, 1, 1, 100, 95),
			Acq(1, "b", 2, 3, 1, 100, 97),
		), 0},
		{"same client twice", H(
			Acq(0, "k", 0, 1, 1, 50, 47),
			Acq(0, "k", 40, 41, 2, 50, 87), // its own earlier belief is still running
		), 0},
		{"no deadline recorded: belief lasts until release", H(
			Acq(0, "k", 0, 1, 1, 50, 0), Rel(0, "k", 100, 101, 1),
			Acq(1, "k", 60, 61, 2, 50, 0),
		), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ex := check.Overlaps(tc.h)
			if n != tc.want {
				t.Fatalf("Overlaps = %d, want %d (%q)", n, tc.want, ex)
			}
			if len(ex) != min(n, 5) {
				t.Errorf("%d examples for %d overlaps", len(ex), n)
			}
			for _, e := range ex {
				if !strings.Contains(e, `key "k"`) || !strings.Contains(e, "client") {
					t.Errorf("example %q names no key or client", e)
				}
			}
		})
	}
}

func TestBeliefs(t *testing.T) {
	got := check.Beliefs(H(
		Acq(0, "k", 0, 1, 1, 50, 47),
		Rel(0, "k", 20, 21, 1),
		Acq(1, "k", 22, 23, 2, 50, 69),
		Wr(1, "k", 80, 81, 2, true, 1), // after its deadline
		AcqUnknown(2, "k", 0, 100, 50),
		Acq(3, "k", 100, 101, 3, 50, 0), // no deadline, no release
	))
	want := []check.Belief{
		{Client: 0, Key: "k", Token: 1, Start: D(1), End: D(20)},
		{Client: 1, Key: "k", Token: 2, Start: D(23), End: D(80)},
		{Client: 3, Key: "k", Token: 3, Start: D(101), End: check.Forever},
	}
	if len(got) != len(want) {
		t.Fatalf("Beliefs = %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("belief %d = %v, want %v", i, got[i], want[i])
		}
	}
}

func TestOverlapsManyExamplesBounded(t *testing.T) {
	var hist check.History
	for c := 0; c < 10; c++ {
		hist = append(hist, Acq(c, "k", float64(c), float64(c)+1, uint64(c+1), 100, 90))
	}
	n, ex := check.Overlaps(hist)
	if n != 45 || len(ex) != 5 {
		t.Fatalf("Overlaps = %d with %d examples, want 45 with 5", n, len(ex))
	}
}
