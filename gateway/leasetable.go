package gateway

import (
	"hash/maphash"

	"github.com/lockgate/lockgate/lock"
)

// leaseTable is a connection's held leases by lock token: an open-addressing
// set of *lock.Lease with linear probing, keyed by each lease's Handle. A
// slot is one pointer (8 B): a map[string]*lock.Lease would keep a copy of
// the handle's string header beside the pointer, three times the bytes per
// held lease, for a key the lease already carries. Hashes are seeded per
// table (lock tokens may be the client's own choice). Not safe for
// concurrent use (the connection's mu guards it); the methods of a nil
// table read as empty.
type leaseTable struct {
	seed  maphash.Seed
	slots []*lock.Lease // len 0 or a power of two
	n     int
}

func newLeaseTable() *leaseTable { return &leaseTable{seed: maphash.MakeSeed()} }

// len is how many leases the table holds.
func (t *leaseTable) len() int {
	if t == nil {
		return 0
	}
	return t.n
}

// find returns the slot of handle, or of the empty slot that ends its probe
// (ok false). The table has at least one slot.
func (t *leaseTable) find(handle string) (i int, ok bool) {
	mask := len(t.slots) - 1
	i = int(maphash.String(t.seed, handle)) & mask
	for {
		l := t.slots[i]
		if l == nil {
			return i, false
		}
		if l.Handle == handle {
			return i, true
		}
		i = (i + 1) & mask
	}
}

// get returns the lease whose lock token is handle, or nil.
func (t *leaseTable) get(handle string) *lock.Lease {
	if t == nil || t.n == 0 {
		return nil
	}
	if i, ok := t.find(handle); ok {
		return t.slots[i]
	}
	return nil
}

// put records l, replacing the lease of the same lock token.
func (t *leaseTable) put(l *lock.Lease) {
	if (t.n+1)*4 > len(t.slots)*3 {
		t.resize(max(8, 2*len(t.slots)))
	}
	i, ok := t.find(l.Handle)
	if !ok {
		t.n++
	}
	t.slots[i] = l
}

// del removes the lease whose lock token is handle, if any, and returns it.
func (t *leaseTable) del(handle string) *lock.Lease {
	if t == nil || t.n == 0 {
		return nil
	}
	i, ok := t.find(handle)
	if !ok {
		return nil
	}
	l := t.slots[i]
	t.removeAt(i)
	return l
}

// removeAt empties slot i and moves back the entries after it in its
// probe run that could sit earlier (backward-shift deletion: no
// tombstones), then shrinks a table that has become mostly empty.
func (t *leaseTable) removeAt(i int) {
	mask := len(t.slots) - 1
	t.slots[i] = nil
	t.n--
	for j := (i + 1) & mask; t.slots[j] != nil; j = (j + 1) & mask {
		home := int(maphash.String(t.seed, t.slots[j].Handle)) & mask
		// Move the entry at j to the hole at i unless its home lies in
		// the cyclic range (i, j]: then it is already as early as it may.
		if (j-home)&mask >= (j-i)&mask {
			t.slots[i], t.slots[j] = t.slots[j], nil
			i = j
		}
	}
	if len(t.slots) > 8 && t.n*8 < len(t.slots) {
		t.resize(len(t.slots) / 2)
	}
}

func (t *leaseTable) resize(size int) {
	old := t.slots
	t.slots = make([]*lock.Lease, size)
	for _, l := range old {
		if l != nil {
			i, _ := t.find(l.Handle)
			t.slots[i] = l
		}
	}
}
