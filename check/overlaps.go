package check

import (
	"container/heap"
	"fmt"
	"math"
	"slices"
	"sort"
	"time"
)

// forever stands for an unbounded instant.
const forever = time.Duration(math.MaxInt64)

// Belief is an interval during which a client believed it held a key.
type Belief struct {
	Client     int
	Key        string
	Token      uint64
	Start, End time.Duration
	// Shared: a shared hold (read lock or semaphore permit, Op.Shared);
	// Permits its semaphore's N (0: no bound).
	Shared  bool
	Permits int
}

func (b Belief) String() string {
	end := b.End.String()
	if b.End == forever {
		end = "∞"
	}
	mode := ""
	switch {
	case b.Shared && b.Permits > 0:
		mode = fmt.Sprintf(", permit of %d", b.Permits)
	case b.Shared:
		mode = ", shared"
	}
	return fmt.Sprintf("client %d (token %d%s) [%v, %s]", b.Client, b.Token, mode, b.Start, end)
}

type leaseID struct {
	client int
	key    string
	token  uint64
}

// Beliefs returns one belief per OK acquire in h, in the order of h.
//
// A belief starts when the grant was received (Acquire.End) and ends at the
// earlier of the Start of the first Release of that lease (same client, key
// and token) and the lease Deadline — except that a client that wrote with
// the lease's token later than that (a client paused past its TTL that wakes
// up and writes: Kleppmann's GC-pause scenario) believed it held the lock
// until the Start of its last such write:
//
//	end = max(min(release start, deadline), start of the last write with the token)
//
// A missing release or a zero (unrecorded) Deadline does not bound the belief.
// Unknown acquires give no belief: the client got no grant it knows of.
//
// A lock that hands out a token twice (see Tokens) may give one client the
// same lease identity (client, key, token) more than once: each grant then
// takes the first release at or after its Start, and the writes before
// the next grant of that identity.
func Beliefs(h History) []Belief {
	releases := make(map[leaseID][]time.Duration)
	writes := make(map[leaseID][]time.Duration)
	grants := make(map[leaseID][]time.Duration)
	for _, o := range h {
		id := leaseID{o.Client, o.Key, o.Token}
		switch {
		case o.Kind == Release:
			releases[id] = append(releases[id], o.Start)
		case o.Kind == Write:
			writes[id] = append(writes[id], o.Start)
		case o.Kind == Acquire && o.OK:
			grants[id] = append(grants[id], o.Start)
		}
	}
	for _, m := range []map[leaseID][]time.Duration{releases, writes, grants} {
		for _, ts := range m {
			slices.Sort(ts)
		}
	}
	var out []Belief
	for _, o := range h {
		if o.Kind != Acquire || !o.OK {
			continue
		}
		id := leaseID{o.Client, o.Key, o.Token}
		end := forever
		if o.Deadline > 0 {
			end = o.Deadline
		}
		// The next grant of the same identity, if any, bounds this one's
		// writes.
		next := forever
		if gs := grants[id]; len(gs) > 1 {
			if i, _ := slices.BinarySearch(gs, o.Start); i+1 < len(gs) {
				for _, g := range gs[i+1:] {
					if g > o.Start {
						next = g
						break
					}
				}
			}
		}
		if rs := releases[id]; len(rs) > 0 {
			if i, _ := slices.BinarySearch(rs, o.Start); i < len(rs) {
				end = min(end, rs[i])
			}
		}
		if ws := writes[id]; len(ws) > 0 {
			// The last write at or after Start and before next.
			i, _ := slices.BinarySearch(ws, next)
			if i > 0 && ws[i-1] >= o.Start {
				end = max(end, ws[i-1])
			}
		}
		out = append(out, Belief{Client: o.Client, Key: o.Key, Token: o.Token, Start: o.End, End: end, Shared: o.Shared, Permits: o.Permits})
	}
	return out
}

// Overlaps counts the pairs of beliefs (see Beliefs) of two different clients
// on the same key that intersect (each starts before the other ends: beliefs
// that only touch do not overlap) and may not coexist: at least one of them
// is exclusive. Shared beliefs (a read lock's, a semaphore's permits) may
// coexist, but a semaphore's may not outnumber its permits: each shared
// belief that starts while Permits or more other shared beliefs of the key
// are running counts one more. Each pair is counted once. The strings
// describe up to five of them.
func Overlaps(h History) (int, []string) {
	pairs, excess, examples := OverlapsModes(h, 5)
	return pairs + excess, examples
}

// OverlapsModes is Overlaps with the conflicting pairs and the permit
// excess apart.
func OverlapsModes(h History, maxExamples int) (pairs, excess int, examples []string) {
	byKey := make(map[string][]Belief)
	for _, b := range Beliefs(h) {
		if b.End > b.Start {
			byKey[b.Key] = append(byKey[b.Key], b)
		}
	}
	for _, k := range sortedKeys(byKey) {
		bs := byKey[k]
		sort.SliceStable(bs, func(i, j int) bool { return bs[i].Start < bs[j].Start })
		p, e := countOverlaps(bs, func(a, b int) bool {
			if len(examples) >= maxExamples {
				return false
			}
			examples = append(examples, fmt.Sprintf("key %q: %v overlaps %v", k, bs[a], bs[b]))
			return true
		}, func(b, running int) {
			if len(examples) < maxExamples {
				examples = append(examples, fmt.Sprintf("key %q: %v is permit %d of a semaphore of %d", k, bs[b], running+1, bs[b].Permits))
			}
		})
		pairs += p
		excess += e
	}
	return pairs, excess, examples
}

// countOverlaps counts the pairs of beliefs of different clients in bs (one
// key's, sorted by Start) that intersect and may not coexist (one of them
// exclusive), as sweep would visit them, in O(n log n) whatever the number
// of pairs: the beliefs still running when bs[b] starts are a heap by End,
// and the pairs bs[b] closes are those running beliefs (the exclusive ones
// only, when bs[b] is shared) less the ones of its own client. example(a,
// b) is called for some of the pairs, in start order within each b, until
// it returns false. It also counts the shared beliefs that start while
// their Permits (> 0) or more other shared beliefs are running (excess),
// calling over(b, running) for each.
func countOverlaps(bs []Belief, example func(a, b int) bool, over func(b, running int)) (pairs, excess int) {
	running := &endHeap{bs: bs}
	mine := make(map[int]int)     // running beliefs per client
	mineExcl := make(map[int]int) // running exclusive beliefs per client
	exclusive, shared := 0, 0     // running beliefs by mode
	wantExamples := example != nil
	for b := range bs {
		for running.Len() > 0 && bs[running.idx[0]].End <= bs[b].Start {
			e := bs[heap.Pop(running).(int)]
			mine[e.Client]--
			if e.Shared {
				shared--
			} else {
				exclusive--
				mineExcl[e.Client]--
			}
		}
		cur := bs[b]
		n := running.Len() - mine[cur.Client]
		if cur.Shared {
			n = exclusive - mineExcl[cur.Client]
			if cur.Permits > 0 && shared >= cur.Permits {
				excess++
				if over != nil {
					over(b, shared)
				}
			}
		}
		pairs += n
		if n > 0 && wantExamples {
			as := make([]int, 0, running.Len())
			for _, a := range running.idx {
				if bs[a].Client != cur.Client && (!cur.Shared || !bs[a].Shared) {
					as = append(as, a)
				}
			}
			sort.Ints(as)
			for _, a := range as {
				if !example(a, b) {
					wantExamples = false
					break
				}
			}
		}
		heap.Push(running, b)
		mine[cur.Client]++
		if cur.Shared {
			shared++
		} else {
			exclusive++
			mineExcl[cur.Client]++
		}
	}
	return pairs, excess
}

// conflict reports whether two holds may not coexist: one is exclusive.
func conflict(a, b Belief) bool { return !a.Shared || !b.Shared }

// endHeap is indices of bs, a min-heap by End.
type endHeap struct {
	bs  []Belief
	idx []int
}

func (h *endHeap) Len() int           { return len(h.idx) }
func (h *endHeap) Less(i, j int) bool { return h.bs[h.idx[i]].End < h.bs[h.idx[j]].End }
func (h *endHeap) Swap(i, j int)      { h.idx[i], h.idx[j] = h.idx[j], h.idx[i] }
func (h *endHeap) Push(x any)         { h.idx = append(h.idx, x.(int)) }
func (h *endHeap) Pop() any {
	x := h.idx[len(h.idx)-1]
	h.idx = h.idx[:len(h.idx)-1]
	return x
}

// sweep is the overlap check of CheckHistory (a test's holds), which lists
// every pair; Overlaps counts a campaign's pairs by the same rule with
// countOverlaps, whose cost does not grow with their number. bs are the
// beliefs of one key sorted by Start. For each bs[b] in order it calls
// pair(a, b) for every earlier bs[a] that is still running when bs[b]
// starts (a.End > b.Start: beliefs that only touch do not overlap) and may
// not coexist with it (conflict: one of them exclusive), in the order they
// started, and then after(b) if after is not nil. Each
// intersecting pair is visited once.
func sweep(bs []Belief, pair func(a, b int), after func(b int)) {
	// active holds the beliefs that began earlier and may still be running.
	var active []int
	for b := range bs {
		kept := active[:0]
		for _, a := range active {
			if bs[a].End > bs[b].Start {
				kept = append(kept, a)
			}
		}
		active = kept
		for _, a := range active {
			if conflict(bs[a], bs[b]) {
				pair(a, b)
			}
		}
		if after != nil {
			after(b)
		}
		active = append(active, b)
	}
}

// sortedKeys returns m's keys in order, so that reports are reproducible.
func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
