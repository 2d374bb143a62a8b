package linearize

import (
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
// Only an acquire of unknown outcome can have been granted t unseen, so
// each such token needs an unknown acquire u of the key of its own (an
// acquire is granted once at most) with
//
//   - u.Start before the End of the first read that showed t, and
//   - no OK acquire of the key granted a token above t and returned
//     before u.Start (tokens grow with the grants: Tokens' rule).
//
// Tokens are matched to unknown acquires by augmenting paths (Kuhn), so a
// token is unexplained only when no assignment explains it. The reads that
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
	unknown := make(map[string][]check.Op)
	grants := make(map[string][]check.Op)
	for _, o := range h {
		switch {
		case o.Kind == check.Acquire && o.Unknown:
			unknown[o.Key] = append(unknown[o.Key], o)
		case o.Kind == check.Acquire && o.OK:
			grants[o.Key] = append(grants[o.Key], o)
		}
	}
	type readID struct {
		client     int
		start, end time.Duration
	}
	counted := make(map[readID]bool)
	for _, key := range slices.Sorted(maps.Keys(phantoms)) {
		toks := make([]uint64, 0, len(phantoms[key]))
		for t := range phantoms[key] {
			toks = append(toks, t)
		}
		slices.Sort(toks)
		us, gs := unknown[key], grants[key]
		// highest[i]: the highest token of the grants returned before
		// us[i] started.
		highest := make([]uint64, len(us))
		for i, u := range us {
			for _, g := range gs {
				if g.End < u.Start {
					highest[i] = max(highest[i], g.Token)
				}
			}
		}
		can := func(t uint64, i int) bool {
			return us[i].Start < phantoms[key][t].first && highest[i] < t
		}
		owner := make([]int, len(us)) // us[i] explains toks[owner[i]-1]
		var augment func(ti int, visited []bool) bool
		augment = func(ti int, visited []bool) bool {
			for i := range us {
				if visited[i] || !can(toks[ti], i) {
					continue
				}
				visited[i] = true
				if owner[i] == 0 || augment(owner[i]-1, visited) {
					owner[i] = ti + 1
					return true
				}
			}
			return false
		}
		for ti, t := range toks {
			if augment(ti, make([]bool, len(us))) {
				continue
			}
			for i := range phantoms[key][t].reads {
				r := &phantoms[key][t].reads[i]
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
