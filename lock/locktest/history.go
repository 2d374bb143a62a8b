package locktest

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
// Holds of one key are ordered by start. Two holds overlap when each starts
// before the other ends (touching ends are not an overlap). Tokens must
// strictly increase in start order. Holds of different keys never conflict.
func CheckHistory(holds []Hold) []Violation {
	var out []Violation
	byKey := make(map[string][]Hold)
	for _, h := range holds {
		if h.End.Before(h.Start) {
			out = append(out, Violation{Kind: InvalidHold, Second: h})
			continue
		}
		byKey[h.Key] = append(byKey[h.Key], h)
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		hs := byKey[k]
		sort.SliceStable(hs, func(i, j int) bool { return hs[i].Start.Before(hs[j].Start) })
		// latest is the hold seen so far that ends last: any later-starting
		// hold that begins before it ends overlaps it.
		latest := hs[0]
		for i := 1; i < len(hs); i++ {
			prev, cur := hs[i-1], hs[i]
			if cur.Start.Before(latest.End) {
				out = append(out, Violation{Kind: Overlap, First: latest, Second: cur})
			}
			switch {
			case cur.Token < prev.Token:
				out = append(out, Violation{Kind: TokenRegression, First: prev, Second: cur})
			case cur.Token == prev.Token:
				out = append(out, Violation{Kind: TokenRepeat, First: prev, Second: cur})
			}
			if cur.End.After(latest.End) {
				latest = cur
			}
		}
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
