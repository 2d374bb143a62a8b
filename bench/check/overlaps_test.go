package check

import (
	"strings"
	"testing"
)

func TestOverlaps(t *testing.T) {
	cases := []struct {
		name string
		h    History
		want int
	}{
		{"empty", nil, 0},
		{"disjoint holders", h(
			acq(0, "k", 0, 1, 1, 100, 95), rel(0, "k", 10, 11, 1),
			acq(1, "k", 20, 21, 2, 100, 115), rel(1, "k", 30, 31, 2),
		), 0},
		{"released before the next grant", h(
			acq(0, "k", 0, 1, 1, 100, 95), rel(0, "k", 10, 11, 1),
			acq(1, "k", 5, 12, 2, 100, 100), // waited behind client 0
		), 0},
		{"release sent exactly when the next grant arrived", h(
			acq(0, "k", 0, 1, 1, 100, 95), rel(0, "k", 12, 13, 1),
			acq(1, "k", 5, 12, 2, 100, 100),
		), 0},
		{"next grant after the deadline without release", h(
			acq(0, "k", 0, 1, 1, 50, 47),
			acq(1, "k", 2, 60, 2, 50, 99),
		), 0},
		{"holder wrote before its deadline, next grant after it", h(
			acq(0, "k", 0, 1, 1, 50, 47), wr(0, "k", 10, 11, 1, true, 1),
			acq(1, "k", 2, 60, 2, 50, 99),
		), 0},
		{"paused client writes after its deadline while another holds", h(
			acq(0, "k", 0, 1, 1, 50, 47),
			acq(1, "k", 2, 60, 2, 50, 99), wr(1, "k", 61, 62, 2, true, 1),
			wrRejected(0, "k", 70, 71, 1, true), // woke up from a pause: believes it still holds
			rel(0, "k", 72, 73, 1),
		), 1},
		{"two clients with overlapping grants", h(
			acq(0, "k", 0, 1, 1, 100, 95), rel(0, "k", 20, 21, 1),
			acq(1, "k", 2, 3, 2, 100, 97), rel(1, "k", 30, 31, 2),
		), 1},
		{"three-way overlap", h(
			acq(0, "k", 0, 1, 1, 100, 95),
			acq(1, "k", 2, 3, 2, 100, 97),
			acq(2, "k", 4, 5, 3, 100, 99),
		), 3},
		{"unknown acquire", h(
			acqUnknown(0, "k", 0, 100, 100),
			acq(1, "k", 2, 3, 2, 100, 97), rel(1, "k", 30, 31, 2),
		), 0},
		{"failed acquire", h(
			acqFail(0, "k", 0, 10, 100),
			acq(1, "k", 2, 3, 2, 100, 97), rel(1, "k", 30, 31, 2),
		), 0},
		{"different keys", h(
			acq(0, "a", 0, 1, 1, 100, 95),
			acq(1, "b", 2, 3, 1, 100, 97),
		), 0},
		{"same client twice", h(
			acq(0, "k", 0, 1, 1, 50, 47),
			acq(0, "k", 40, 41, 2, 50, 87), // its own earlier belief is still running
		), 0},
		{"no deadline recorded: belief lasts until release", h(
			acq(0, "k", 0, 1, 1, 50, 0), rel(0, "k", 100, 101, 1),
			acq(1, "k", 60, 61, 2, 50, 0),
		), 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			n, ex := Overlaps(tc.h)
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
	got := Beliefs(h(
		acq(0, "k", 0, 1, 1, 50, 47),
		rel(0, "k", 20, 21, 1),
		acq(1, "k", 22, 23, 2, 50, 69),
		wr(1, "k", 80, 81, 2, true, 1), // after its deadline
		acqUnknown(2, "k", 0, 100, 50),
		acq(3, "k", 100, 101, 3, 50, 0), // no deadline, no release
	))
	want := []Belief{
		{Client: 0, Key: "k", Token: 1, Start: d(1), End: d(20)},
		{Client: 1, Key: "k", Token: 2, Start: d(23), End: d(80)},
		{Client: 3, Key: "k", Token: 3, Start: d(101), End: forever},
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
	var hist History
	for c := 0; c < 10; c++ {
		hist = append(hist, acq(c, "k", float64(c), float64(c)+1, uint64(c+1), 100, 90))
	}
	n, ex := Overlaps(hist)
	if n != 45 || len(ex) != 5 {
		t.Fatalf("Overlaps = %d with %d examples, want 45 with 5", n, len(ex))
	}
}
