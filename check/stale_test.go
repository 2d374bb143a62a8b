package check_test

import (
	"testing"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

func TestStaleWrites(t *testing.T) {
	cases := []struct {
		name                         string
		h                            check.History
		accepted, rejected, unfenced int
	}{
		{"empty", nil, 0, 0, 0},
		{"in-order tokens", H(
			Wr(0, "k", 0, 1, 1, true, 1), Wr(0, "k", 0, 1, 1, false, 1),
			Wr(0, "k", 2, 3, 1, true, 2), Wr(0, "k", 2, 3, 1, false, 2), // same holder again
			Wr(1, "k", 4, 5, 2, true, 3), Wr(1, "k", 4, 5, 2, false, 3),
			Wr(2, "k", 6, 7, 5, true, 4), Wr(2, "k", 6, 7, 5, false, 4),
		), 0, 0, 0},
		{"lower token applied after a higher one in the fenced store", H(
			Wr(1, "k", 0, 1, 2, true, 1),
			Wr(0, "k", 2, 3, 1, true, 2),
		), 1, 0, 0},
		{"order is StoreSeq, not time", H(
			Wr(1, "k", 0, 1, 2, true, 2), // applied after the write below despite its times
			Wr(0, "k", 2, 3, 1, true, 1),
		), 0, 0, 0},
		{"stale write rejected", H(
			Wr(1, "k", 0, 1, 2, true, 1), Wr(1, "k", 0, 1, 2, false, 1),
			WrRejected(0, "k", 2, 3, 1, true), Wr(0, "k", 2, 3, 1, false, 2),
		), 0, 1, 1},
		{"unfenced out of order", H(
			Wr(1, "k", 0, 1, 3, false, 1),
			Wr(0, "k", 2, 3, 1, false, 2),
			Wr(2, "k", 4, 5, 2, false, 3), // still below 3
			Wr(3, "k", 6, 7, 4, false, 4),
		), 0, 0, 2},
		{"keys are separate", H(
			Wr(1, "a", 0, 1, 5, true, 1),
			Wr(0, "b", 2, 3, 1, true, 2),
		), 0, 0, 0},
		{"unknown and unapplied writes are ignored", H(
			Wr(1, "k", 0, 1, 5, true, 1),
			check.Op{Client: 0, Key: "k", Kind: check.Write, Start: D(2), End: D(3), Unknown: true, Token: 1, Fenced: true},
			Wr(0, "k", 4, 5, 1, true, 0),
		), 0, 0, 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, r, u := check.StaleWrites(tc.h)
			if a != tc.accepted || r != tc.rejected || u != tc.unfenced {
				t.Fatalf("StaleWrites = (%d, %d, %d), want (%d, %d, %d)", a, r, u, tc.accepted, tc.rejected, tc.unfenced)
			}
		})
	}
}
