package lock

import (
	"math/rand/v2"
	"slices"
	"testing"
)

// TestLeaseSetModel: random adds (tokens that repeat, leases added twice)
// and removes (of leases in the set and not) keep the set equal to a plain
// model, found by token, through growth and shrinking.
func TestLeaseSetModel(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var ls leaseSet
	model := map[*Lease]bool{}
	var all []*Lease
	for step := range 200_000 {
		switch x := r.IntN(10); {
		case x < 5 || len(all) == 0:
			var l *Lease
			if len(all) > 0 && r.IntN(10) == 0 {
				l = all[r.IntN(len(all))] // again, in the set or not
			} else {
				l = &Lease{Token: Token(r.IntN(3000))} // tokens repeat
				all = append(all, l)
			}
			ls.add(l)
			model[l] = true
		default:
			l := all[r.IntN(len(all))]
			ls.remove(l)
			delete(model, l)
		}
		if step > 100_000 && r.IntN(3) == 0 { // drain: the table shrinks
			for l := range model {
				ls.remove(l)
				delete(model, l)
				break
			}
		}
		if ls.n != len(model) {
			t.Fatalf("step %d: %d leases in the set, want %d", step, ls.n, len(model))
		}
		if step%997 == 0 {
			byToken := map[Token][]*Lease{}
			for l := range model {
				byToken[l.Token] = append(byToken[l.Token], l)
			}
			for tok := Token(0); tok < 3000; tok += 7 {
				got, want := ls.withToken(tok, nil), byToken[tok]
				if len(got) != len(want) || !containsAll(got, want) {
					t.Fatalf("step %d: token %d: %d leases, want %d", step, tok, len(got), len(want))
				}
			}
		}
	}
	if len(model) < 100 && len(ls.slots) > 1024 {
		t.Errorf("%d slots for %d leases: the table did not shrink", len(ls.slots), len(model))
	}
}

func containsAll(got, want []*Lease) bool {
	for _, l := range want {
		if !slices.Contains(got, l) {
			return false
		}
	}
	return true
}
