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
	// Mode is how the key was held: shared holds may coexist, an
	// exclusive one (the zero value) coexists with none. Permits, when
	// positive, is the semaphore's N: at most that many shared holds at
	// once.
	Mode    lock.Mode
	Permits int
}

func (h Hold) String() string {
	mode := ""
	switch {
	case h.Permits > 0:
		mode = fmt.Sprintf(" (permit of %d)", h.Permits)
	case h.Mode == lock.ModeShared:
		mode = " (shared)"
	}
	return fmt.Sprintf("%s holds %q with token %d%s for [%s, %s]", h.Holder, h.Key, h.Token, mode,
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
	// PermitsExceeded: a shared hold began while its semaphore's
	// Permits (or more) other holds of the key were running.
	PermitsExceeded ViolationKind = "permits exceeded"
)

// Violation is one breach of mutual exclusion or fencing found in a history.
// First is the earlier hold of the pair (by start time).
type Violation struct {
	Kind          ViolationKind
	First, Second Hold
}

func (v Violation) String() string {
	if v.Kind == InvalidHold || v.Kind == PermitsExceeded {
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
// overlap) and one of them is exclusive (shared holds may coexist);
// unlike Overlaps, two holds of the same holder conflict too (a test's
// holder is one lease, not a client that may retry). Every conflicting
// pair is reported once. A shared hold with Permits > 0 that starts while
// Permits or more shared holds of its key run is PermitsExceeded. Tokens
// must strictly increase in start order from one exclusive hold to the
// next hold, and from every shared hold to the next exclusive one; shared
// holds between two exclusive ones may carry their tokens in any order,
// never the same one twice. Holds of different keys never conflict.
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
		b := Belief{Client: c, Key: h.Key, Token: uint64(h.Token), Start: h.Start.Sub(epoch), End: h.End.Sub(epoch),
			Shared: h.Mode == lock.ModeShared || h.Permits > 0, Permits: h.Permits}
		byKey[h.Key] = append(byKey[h.Key], entry{h, b})
	}
	for _, k := range sortedKeys(byKey) {
		es := byKey[k]
		sort.SliceStable(es, func(i, j int) bool { return es[i].belief.Start < es[j].belief.Start })
		bs := make([]Belief, len(es))
		for i, e := range es {
			bs[i] = e.belief
		}
		// Since the last exclusive hold (lastExcl): the highest token
		// (top, the exclusive hold's or a later shared one's), and the
		// shared holds' tokens. The next exclusive hold's token must be
		// above top; a shared one's above lastExcl's and none of the
		// shared tokens.
		lastExcl, top := -1, -1
		sharedTok := map[lock.Token]int{}
		sweep(bs, func(a, b int) {
			out = append(out, Violation{Kind: Overlap, First: es[a].hold, Second: es[b].hold})
		}, func(b int) {
			cur := es[b]
			if cur.belief.Shared && cur.belief.Permits > 0 {
				running := 0
				for a := range b {
					if bs[a].Shared && bs[a].End > bs[b].Start {
						running++
					}
				}
				if running >= cur.belief.Permits {
					out = append(out, Violation{Kind: PermitsExceeded, Second: cur.hold})
				}
			}
			against := top
			if cur.belief.Shared {
				against = lastExcl
			}
			switch {
			case against >= 0 && cur.hold.Token < es[against].hold.Token:
				out = append(out, Violation{Kind: TokenRegression, First: es[against].hold, Second: cur.hold})
			case against >= 0 && cur.hold.Token == es[against].hold.Token:
				out = append(out, Violation{Kind: TokenRepeat, First: es[against].hold, Second: cur.hold})
			case cur.belief.Shared:
				if a, ok := sharedTok[cur.hold.Token]; ok {
					out = append(out, Violation{Kind: TokenRepeat, First: es[a].hold, Second: cur.hold})
				}
			}
			if !cur.belief.Shared {
				lastExcl, top = b, b
				clear(sharedTok)
				return
			}
			if _, ok := sharedTok[cur.hold.Token]; !ok {
				sharedTok[cur.hold.Token] = b
			}
			if top < 0 || cur.hold.Token > es[top].hold.Token {
				top = b
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
