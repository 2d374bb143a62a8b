package lock

// leaseSet is a session's live leases, found by fencing token: an open
// addressing table of lease pointers (linear probing, a lease's home slot
// from its token), 8 bytes a slot at most 7/8 full. A map by token took
// about 30 bytes a lease, plus a second map for the rare lease whose token
// another lease of the session already has: here leases with the same
// token simply sit in the same probe run. Not safe for concurrent use
// (Session.mu guards it).
type leaseSet struct {
	slots []*Lease // len 0 or a power of two
	n     int
}

// home is the slot where a lease with token t starts its probe.
func (ls *leaseSet) home(t Token) int {
	return int((uint64(t)*0x9E3779B97F4A7C15)>>32) & (len(ls.slots) - 1)
}

// add puts l in the set; adding a lease already in it changes nothing.
func (ls *leaseSet) add(l *Lease) {
	if (ls.n+1)*8 > len(ls.slots)*7 {
		ls.resize(max(8, 2*len(ls.slots)))
	}
	mask := len(ls.slots) - 1
	i := ls.home(l.Token)
	for ls.slots[i] != nil {
		if ls.slots[i] == l {
			return
		}
		i = (i + 1) & mask
	}
	ls.slots[i] = l
	ls.n++
}

// remove takes l out of the set, if it is there: the leases after it in
// its probe run move back, so that every lease stays reachable from its
// home slot without tombstones.
func (ls *leaseSet) remove(l *Lease) {
	if ls.n == 0 {
		return
	}
	mask := len(ls.slots) - 1
	i := ls.home(l.Token)
	for ls.slots[i] != l {
		if ls.slots[i] == nil {
			return
		}
		i = (i + 1) & mask
	}
	for j := i; ; {
		j = (j + 1) & mask
		m := ls.slots[j]
		if m == nil {
			break
		}
		// m may fill the hole at i unless its home lies cyclically in (i, j].
		if k := ls.home(m.Token); (i < j && i < k && k <= j) || (i > j && (i < k || k <= j)) {
			continue
		}
		ls.slots[i] = m
		i = j
	}
	ls.slots[i] = nil
	ls.n--
	if len(ls.slots) > 64 && ls.n*8 < len(ls.slots) {
		ls.resize(len(ls.slots) / 4) // give back what a shrunk session no longer needs
	}
}

// withToken appends the leases of the set whose token is t to out.
func (ls *leaseSet) withToken(t Token, out []*Lease) []*Lease {
	if ls.n == 0 {
		return out
	}
	mask := len(ls.slots) - 1
	for i := ls.home(t); ls.slots[i] != nil; i = (i + 1) & mask {
		if ls.slots[i].Token == t {
			out = append(out, ls.slots[i])
		}
	}
	return out
}

// resize moves the leases to a table of size slots (a power of two, more
// than 8/7 of the leases).
func (ls *leaseSet) resize(size int) {
	old := ls.slots
	ls.slots, ls.n = make([]*Lease, size), 0
	for _, l := range old {
		if l != nil {
			ls.add(l)
		}
	}
}
