package check

import "sort"

// StaleWrites examines the writes of h.
//
// For each store and key it takes the OK writes that the store applied
// (StoreSeq > 0; an OK write with StoreSeq 0 carries no order and is
// ignored), in StoreSeq order, and counts those whose token is lower than the
// highest token the store had applied before for that key (an equal token is
// the same holder writing again, and is fine):
//
//   - accepted: such writes in the fenced store. Must be 0.
//   - unfencedConflicts: such writes in the unfenced store (lost updates the
//     fence would have prevented).
//
// rejected counts the fenced writes that completed and were rejected (OK
// false, Unknown false): the fence at work. The chaos client must therefore
// record a write that failed for any other reason as Unknown.
func StaleWrites(h History) (accepted, rejected, unfencedConflicts int) {
	type storeKey struct {
		fenced bool
		key    string
	}
	applied := make(map[storeKey][]Op)
	for _, o := range h {
		if o.Kind != Write {
			continue
		}
		switch {
		case o.OK && o.StoreSeq > 0:
			k := storeKey{o.Fenced, o.Key}
			applied[k] = append(applied[k], o)
		case !o.OK && !o.Unknown && o.Fenced:
			rejected++
		}
	}
	for k, ws := range applied {
		sort.SliceStable(ws, func(i, j int) bool { return ws[i].StoreSeq < ws[j].StoreSeq })
		var high uint64
		for i, w := range ws {
			if i > 0 && w.Token < high {
				if k.fenced {
					accepted++
				} else {
					unfencedConflicts++
				}
			}
			high = max(high, w.Token)
		}
	}
	return accepted, rejected, unfencedConflicts
}
