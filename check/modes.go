package check

import (
	"fmt"
	"sort"
)

// Modes: a key may be held exclusively (a mutex), or shared by any number
// of holders (a read lock), or by at most Permits holders (a semaphore).
// Op.Shared and Op.Permits record an acquire's mode; Overlaps judges the
// holds of each mode (an exclusive holder alone, or only shared ones, at
// most Permits of them), ModeTokens their fencing tokens.

// ModeTokens checks the tokens of a history with shared holds: on each key,
// an exclusive grant's token must be above the token of every shared grant
// received before it, and a shared grant's above that of every exclusive
// grant received before it — provided the later grant was received while
// its lease could still be live (End before its Deadline, or no
// Deadline): a grant whose answer arrived after its lease had run out may
// have been overtaken by the next grant, and is nobody's hold.
//
// Why it holds for a correct lock: two grants of which one is exclusive
// never hold the key at once, so the one received first was granted first
// or had ended — by release, which comes after its receipt, or by expiry,
// which comes after its Deadline, before the receipt of the other one —
// and tokens increase with the grants. It counts the grants that break it,
// with up to maxExamples (≤ 0: 5) described. Histories without shared
// holds have nothing to check here (Tokens covers them). O(n log n).
func ModeTokens(h History, maxExamples int) (violations int, examples []string) {
	if maxExamples <= 0 {
		maxExamples = 5
	}
	byKey := make(map[string][]Op)
	shared := make(map[string]bool)
	for _, o := range h {
		if o.Kind == Acquire && o.OK {
			byKey[o.Key] = append(byKey[o.Key], o)
			if o.Shared {
				shared[o.Key] = true
			}
		}
	}
	for _, k := range sortedKeys(byKey) {
		if !shared[k] {
			continue
		}
		gs := byKey[k]
		sort.SliceStable(gs, func(i, j int) bool { return gs[i].End < gs[j].End })
		// The highest token of each mode among the grants received so
		// far (strictly before: grants received at the same instant are
		// not ordered).
		var top [2]uint64 // [exclusive, shared]
		var topOp [2]Op
		mode := func(o Op) int {
			if o.Shared {
				return 1
			}
			return 0
		}
		for i := 0; i < len(gs); {
			j := i
			for j < len(gs) && gs[j].End == gs[i].End {
				j++
			}
			for _, g := range gs[i:j] {
				live := g.Deadline == 0 || g.End < g.Deadline
				other := 1 - mode(g)
				if live && top[other] != 0 && g.Token <= top[other] {
					violations++
					if len(examples) < maxExamples {
						examples = append(examples, fmt.Sprintf("key %q: %s token %d not above %s token %d received before it: %v after %v",
							k, modeName(g), g.Token, modeName(topOp[other]), top[other], g, topOp[other]))
					}
				}
			}
			for _, g := range gs[i:j] {
				if m := mode(g); g.Token > top[m] {
					top[m], topOp[m] = g.Token, g
				}
			}
			i = j
		}
	}
	return violations, examples
}

func modeName(o Op) string {
	switch {
	case o.Shared && o.Permits > 0:
		return fmt.Sprintf("permit (of %d)", o.Permits)
	case o.Shared:
		return "shared"
	}
	return "exclusive"
}

// OnlySharedKeys returns the ops of h on keys with shared grants: those
// SplitShared leaves out.
func OnlySharedKeys(h History) History {
	shared := sharedKeys(h)
	var out History
	for _, o := range h {
		if shared[o.Key] {
			out = append(out, o)
		}
	}
	return out
}

// sharedKeys returns the keys of h with shared grants.
func sharedKeys(h History) map[string]bool {
	shared := make(map[string]bool)
	for _, o := range h {
		if o.Kind == Acquire && o.Shared {
			shared[o.Key] = true
		}
	}
	return shared
}

// SplitShared returns the ops of h on keys without shared grants (the
// linearizability model's mutex applies to them) and how many keys it left
// out.
func SplitShared(h History) (mutex History, sharedCount int) {
	shared := sharedKeys(h)
	if len(shared) == 0 {
		return h, 0
	}
	mutex = make(History, 0, len(h))
	for _, o := range h {
		if !shared[o.Key] {
			mutex = append(mutex, o)
		}
	}
	return mutex, len(shared)
}
