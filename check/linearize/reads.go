package linearize

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
)

// Reads: a campaign's Inspect answers (check.Read), checked by the lock
// model (see the comment at the top of linearizability.go) except for the
// phantom reads, which ReadPhantoms judges.

// knownTokens returns, per key, the tokens its OK acquires were granted.
func knownTokens(h check.History) map[string]map[uint64]bool {
	known := make(map[string]map[uint64]bool)
	for _, o := range h {
		if o.Kind == check.Acquire && o.OK {
			if known[o.Key] == nil {
				known[o.Key] = make(map[uint64]bool)
			}
			known[o.Key][o.Token] = true
		}
	}
	return known
}

// answered reports whether o is a read that tells something: it completed
// with an answer (a failed or unknown read tells nothing).
func answered(o check.Op) bool { return o.Kind == check.Read && o.OK && !o.Unknown }

// phantom reports whether the answered read o shows a token that no known
// grant of its key carried.
func phantom(o check.Op, known map[string]map[uint64]bool) bool {
	for _, t := range o.Holders {
		if !known[o.Key][t] {
			return true
		}
	}
	return false
}

// readOperation is the porcupine operation of read o, and false when the
// model leaves it out (not answered, or a phantom).
func readOperation(o check.Op, known map[string]map[uint64]bool) (porcupine.Operation, bool) {
	if !answered(o) || phantom(o, known) {
		return porcupine.Operation{}, false
	}
	in := lockInput{Kind: check.Read, Key: o.Key, Client: o.Client, Call: int64(o.Start), Ret: int64(o.End)}
	switch len(o.Holders) {
	case 0:
	case 1:
		in.Seen = o.Holders[0]
	default:
		in.SeenMany = true
	}
	return porcupine.Operation{ClientId: o.Client, Input: in, Call: int64(o.Start), Output: lockOutput{OK: true}, Return: int64(o.End)}, true
}

// ReadStats is what ReadPhantoms found.
type ReadStats struct {
	// Reads counts the answered reads (the linearizability search checks
	// those of mutex keys that are not Phantoms).
	Reads int
	// Phantoms counts the answered reads that showed a token no known
	// grant of their key carried; Unexplained those of them that no
	// unknown acquire of the key can explain. Unexplained must be 0.
	Phantoms, Unexplained int
	// Examples describes a few unexplained ones.
	Examples []string
}

// ReadPhantoms judges the reads the linearizability search leaves out:
// those that showed a token t that no OK acquire of their key was granted.
// Such a grant was made for a request whose answer the client never took:
// an acquire of unknown outcome; an acquire that gave up (its wait ran out
// or was cancelled) while its grant was being committed, which the lock
// contract then releases; or an earlier attempt of an acquire that the
// client re-sent with the same handle after its connection failed, whose
// grant expired before the re-sent copy arrived and was granted anew
// (raftlock's idempotent handles: the acquire returns the later grant,
// and the earlier one held the key, unseen, until its TTL ran out). So t
// is explained by any acquire u of the key, whatever its outcome, with
//
//   - u.Start before the End of the first read that showed t,
//   - no OK acquire of the key granted a token above t and returned
//     before u.Start (tokens grow with the grants: Tokens' rule), and
//   - when u itself was granted, a token above t (its earlier attempt's
//     grant came before its own);
//
// and, on a key without shared holds, a read that started after a grant
// of a token above t returned cannot show t: that grant came after t's,
// which had ended by then (a mutex has one holder).
//
// An acquire may explain several tokens (one per attempt). The reads that
// showed an unexplained token count in Unexplained, with up to
// maxExamples (≤ 0: 5) described.
func ReadPhantoms(h check.History, maxExamples int) ReadStats {
	if maxExamples <= 0 {
		maxExamples = 5
	}
	known := knownTokens(h)
	var st ReadStats
	type seen struct {
		first time.Duration // the earliest End of a read that showed it
		reads []check.Op
	}
	phantoms := make(map[string]map[uint64]*seen)
	for _, o := range h {
		if !answered(o) {
			continue
		}
		st.Reads++
		if !phantom(o, known) {
			continue
		}
		st.Phantoms++
		if phantoms[o.Key] == nil {
			phantoms[o.Key] = make(map[uint64]*seen)
		}
		for _, t := range o.Holders {
			if known[o.Key][t] {
				continue
			}
			s := phantoms[o.Key][t]
			if s == nil {
				s = &seen{first: o.End}
				phantoms[o.Key][t] = s
			}
			s.first = min(s.first, o.End)
			s.reads = append(s.reads, o)
		}
	}
	if len(phantoms) == 0 {
		return st
	}
	acquires := make(map[string][]check.Op)
	grants := make(map[string][]check.Op)
	for _, o := range h {
		if o.Kind == check.Acquire {
			acquires[o.Key] = append(acquires[o.Key], o)
			if o.OK {
				grants[o.Key] = append(grants[o.Key], o)
			}
		}
	}
	type readID struct {
		client     int
		start, end time.Duration
	}
	counted := make(map[readID]bool)
	shared := make(map[string]bool)
	for _, o := range h {
		if o.Kind == check.Acquire && o.Shared {
			shared[o.Key] = true
		}
	}
	for _, key := range slices.Sorted(maps.Keys(phantoms)) {
		us, gs := acquires[key], grants[key]
		slices.SortFunc(gs, func(a, b check.Op) int { return cmp.Compare(a.End, b.End) })
		// highestBefore is the highest token of the grants that returned
		// before d.
		highestBefore := func(d time.Duration) uint64 {
			var top uint64
			for _, g := range gs {
				if g.End >= d {
					break
				}
				top = max(top, g.Token)
			}
			return top
		}
		for _, t := range slices.Sorted(maps.Keys(phantoms[key])) {
			ph := phantoms[key][t]
			explained := slices.ContainsFunc(us, func(u check.Op) bool {
				return u.Start < ph.first && (!u.OK || u.Token > t) && highestBefore(u.Start) < t
			})
			for i := range ph.reads {
				r := &ph.reads[i]
				if explained && (shared[key] || highestBefore(r.Start) < t) {
					continue
				}
				if id := (readID{r.Client, r.Start, r.End}); counted[id] {
					continue
				} else {
					counted[id] = true
				}
				st.Unexplained++
				if len(st.Examples) < maxExamples {
					st.Examples = append(st.Examples, fmt.Sprintf("key %q: %v showed holders %v: token %d was granted by no acquire that could have carried it", key, *r, r.Holders, t))
				}
			}
		}
	}
	return st
}
