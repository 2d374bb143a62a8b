package check

// Holds: the history a conformance test or the demo records, checked on the
// same time base and by the same overlap sweep as a campaign's beliefs.

import (
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Hold is one interval during which a client believed it held a key: from
// the moment its grant was received to the earlier of the moment its release
// was sent and its lease deadline. All times come from one monotonic clock.
type Hold struct {
	Key    string
	Holder string
	Token  lock.Token
	Start  time.Time
	End    time.Time
}

func (h Hold) String() string {
	return fmt.Sprintf("%s holds %q with token %d for [%s, %s]", h.Holder, h.Key, h.Token,
		h.Start.Format("15:04:05.000000"), h.End.Format("15:04:05.000000"))
}

// ViolationKind names what a Violation broke.
type ViolationKind string

// The kinds of violation CheckHistory reports.
const (
	// Overlap: two holds of the same key intersect in time.
	Overlap ViolationKind = "overlap"
	// TokenRegression: a later grant of a key carries a lower token.
	TokenRegression ViolationKind = "token regression"
	// TokenRepeat: two grants of a key carry the same token.
	TokenRepeat ViolationKind = "token repeat"
	// InvalidHold: a hold ends before it starts (a recording bug).
	InvalidHold ViolationKind = "invalid hold"
)

// Violation is one breach of mutual exclusion or fencing found in a history.
// First is the earlier hold of the pair (by start time).
type Violation struct {
	Kind          ViolationKind
	First, Second Hold
}

func (v Violation) String() string {
	if v.Kind == InvalidHold {
		return fmt.Sprintf("%s: %v", v.Kind, v.Second)
	}
	return fmt.Sprintf("%s: %v; then %v", v.Kind, v.First, v.Second)
}

// CheckHistory reports every overlap and token regression or repeat in a
// history of holds; nil means the history is consistent with a correct lock.
// It is a pure function: the input is not modified.
//
// The holds are put on a campaign's time base (durations since the earliest
// start) as Beliefs, one client per Holder, and checked by the sweep that
// Overlaps uses: holds of one key are ordered by start, and two holds
// overlap when each starts before the other ends (touching ends are not an
// overlap); unlike Overlaps, two holds of the same holder conflict too (a
// test's holder is one lease, not a client that may retry). Every
// intersecting pair is reported once. Tokens must strictly increase in start
// order. Holds of different keys never conflict.
func CheckHistory(holds []Hold) []Violation {
	var out []Violation
	type entry struct {
		hold   Hold
		belief Belief
	}
	byKey := make(map[string][]entry)
	clients := make(map[string]int)
	var epoch time.Time
	for _, h := range holds {
		if h.End.Before(h.Start) {
			continue
		}
		if epoch.IsZero() || h.Start.Before(epoch) {
			epoch = h.Start
		}
	}
	for _, h := range holds {
		if h.End.Before(h.Start) {
			out = append(out, Violation{Kind: InvalidHold, Second: h})
			continue
		}
		c, ok := clients[h.Holder]
		if !ok {
			c = len(clients)
			clients[h.Holder] = c
		}
		b := Belief{Client: c, Key: h.Key, Token: uint64(h.Token), Start: h.Start.Sub(epoch), End: h.End.Sub(epoch)}
		byKey[h.Key] = append(byKey[h.Key], entry{h, b})
	}
	for _, k := range sortedKeys(byKey) {
		es := byKey[k]
		sort.SliceStable(es, func(i, j int) bool { return es[i].belief.Start < es[j].belief.Start })
		bs := make([]Belief, len(es))
		for i, e := range es {
			bs[i] = e.belief
		}
		sweep(bs, func(a, b int) {
			out = append(out, Violation{Kind: Overlap, First: es[a].hold, Second: es[b].hold})
		}, func(b int) {
			if b == 0 {
				return
			}
			prev, cur := es[b-1].hold, es[b].hold
			switch {
			case cur.Token < prev.Token:
				out = append(out, Violation{Kind: TokenRegression, First: prev, Second: cur})
			case cur.Token == prev.Token:
				out = append(out, Violation{Kind: TokenRepeat, First: prev, Second: cur})
			}
		})
	}
	return out
}

// Recorder collects holds from many goroutines.
type Recorder struct {
	mu    sync.Mutex
	holds []Hold
}

// Add records a hold.
func (r *Recorder) Add(h Hold) {
	r.mu.Lock()
	r.holds = append(r.holds, h)
	r.mu.Unlock()
}

// Holds returns a copy of what was recorded.
func (r *Recorder) Holds() []Hold {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Hold(nil), r.holds...)
}
