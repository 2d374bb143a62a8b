package gateway

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/lockgate/lockgate/lock"
)

// TestLeaseTable checks the connection's lease table against a map through
// random puts, replacements and deletes, across its growth and shrinking.
func TestLeaseTable(t *testing.T) {
	var empty *leaseTable
	if empty.len() != 0 || empty.get("x") != nil || empty.del("x") != nil {
		t.Fatal("a nil table does not read as empty")
	}
	tab := newLeaseTable()
	want := map[string]*lock.Lease{}
	rng := rand.New(rand.NewPCG(1, 2))
	handle := func() string { return fmt.Sprintf("%032x", rng.IntN(3000)) }
	for step := range 200_000 {
		h := handle()
		switch op := rng.IntN(10); {
		case op < 5 && step < 120_000, op < 2:
			l := &lock.Lease{Key: "k", Handle: h}
			tab.put(l)
			want[h] = l
		default:
			if got := tab.del(h); got != want[h] {
				t.Fatalf("step %d: del(%s) = %p, want %p", step, h, got, want[h])
			}
			delete(want, h)
		}
		if tab.len() != len(want) {
			t.Fatalf("step %d: len %d, want %d", step, tab.len(), len(want))
		}
		if step%1000 == 0 {
			for h, l := range want {
				if tab.get(h) != l {
					t.Fatalf("step %d: get(%s) lost its lease", step, h)
				}
			}
		}
	}
	for h := range want {
		tab.del(h)
	}
	if tab.len() != 0 || len(tab.slots) != 8 {
		t.Fatalf("emptied table: len %d, %d slots", tab.len(), len(tab.slots))
	}
}
