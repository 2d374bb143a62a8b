package check

import (
	"fmt"
	"sort"
	"strconv"
	"time"
)

// Elections: a leader is the exclusive holder of an election key (lock/
// election), so its terms are the history's OK Acquire ops of the key and
// at most one leader at a time is Overlaps' verdict on them. Observers
// (election.Observe) report who leads; Elections judges their reports.

// Observation is one leader an observer reported (election.Observe): At is
// when the report was received, Token the leader's fencing token (its
// term), Value the value it campaigned with (a campaign's clients put
// their Client number there, in decimal). Present false is a report that nobody leads.
type Observation struct {
	Observer int           `json:"observer"`
	Key      string        `json:"key"`
	At       time.Duration `json:"at"`
	Present  bool          `json:"present,omitempty"`
	Token    uint64        `json:"token,omitempty"`
	Value    string        `json:"value,omitempty"`
}

// WatchSession is one watch an observer's Observe opened: Start when it
// was asked for, Synced when its EventSynced was received (0: never), End
// when it ended: Broken when by an EventError or the channel closing under
// a live observer (Observe then watches again), else when the observer was
// stopped.
type WatchSession struct {
	Observer int           `json:"observer"`
	Key      string        `json:"key"`
	Start    time.Duration `json:"start"`
	Synced   time.Duration `json:"synced,omitempty"`
	End      time.Duration `json:"end"`
	Broken   bool          `json:"broken,omitempty"`
}

// ElectionResult is what Elections found. OrderViolations, the
// unexplained PhantomTokens (PhantomTokens − PhantomsExplained) and Unseen
// must be 0.
type ElectionResult struct {
	// Terms counts the OK grants of the observed keys; Reports the
	// observers' reports of a leader (Present), Vacant their reports of
	// none; Watches the watch sessions, Rewatches those that broke.
	Terms, Reports, Vacant, Watches, Rewatches int
	// OrderViolations counts the reports of a leader whose token is not
	// above every token its observer reported before.
	OrderViolations int
	// PhantomTokens counts the (key, token) pairs reported that no OK
	// grant of the key requested before the report carries;
	// PhantomsExplained those an Unknown acquire of the key requested
	// before it may have been granted (a campaign that gave up as it was
	// granted: the contract releases that grant, but a watch saw it).
	PhantomTokens, PhantomsExplained int
	// PhantomsInFlight counts the unexplained phantoms whose Value names
	// a client with an acquire of the key in flight at the first report
	// (started before, returned after: with another token, or none): the
	// backend made it the holder, its client never learned it (a ghost
	// term). They are violations all the same.
	PhantomsInFlight int
	// Per (term, observer of its key): Seen, the observer reported it;
	// Unseen, not reported although a watch of that observer was in sync
	// before the term was requested and neither broke nor skipped it
	// (it lasted to the observer's end, or reported a later term);
	// MissedDuringRewatch, not reported and the watch in sync when the
	// term was requested broke before reporting it or any later term
	// (Observe's re-watch reports the leader, not every term);
	// BeforeSync, requested before the observer's first watch was in
	// sync.
	Seen, Unseen, MissedDuringRewatch, BeforeSync int
	Examples                                      []string
}

// Violations is the number of broken promises.
func (r ElectionResult) Violations() int {
	return r.OrderViolations + r.PhantomTokens - r.PhantomsExplained + r.Unseen
}

// Elections checks the observers' reports of the history's elections
// (obs: every report; sessions: every watch the observers opened):
//
//  1. order: each observer's leader tokens strictly increase, in the
//     order it received them (across its re-watches too);
//  2. reality: every token reported for a key was carried by an OK grant
//     of the key whose acquire started before the report, or else is
//     matched to a distinct Unknown acquire of the key started before it;
//  3. completeness: an OK grant of a key whose acquire started after a
//     watch of an observer of the key was in sync (Synced ≤ its Start) is
//     reported by that observer unless that watch broke without reporting
//     it or any later token. A watch delivers every grant in order, so a
//     watch in sync before the request that lasted, or that reported a
//     later granted term, saw this one; Observe reports every grant it
//     sees.
//
// maxExamples (≤ 0: 5) bounds the examples. Pure; O(n log n) plus
// O(terms × observers × sessions of an observer).
func Elections(h History, obs []Observation, sessions []WatchSession, maxExamples int) ElectionResult {
	if maxExamples <= 0 {
		maxExamples = 5
	}
	var r ElectionResult
	example := func(format string, args ...any) {
		if len(r.Examples) < maxExamples {
			r.Examples = append(r.Examples, fmt.Sprintf(format, args...))
		}
	}
	granted := map[string]map[uint64]time.Duration{} // key → token → earliest acquire Start
	unknowns := map[string][]time.Duration{}         // key → Starts of Unknown acquires
	observed := map[string]bool{}
	for _, o := range obs {
		observed[o.Key] = true
	}
	for _, s := range sessions {
		observed[s.Key] = true
	}
	var terms []Op
	for _, o := range h {
		if o.Kind != Acquire || !observed[o.Key] {
			continue
		}
		switch {
		case o.OK:
			if granted[o.Key] == nil {
				granted[o.Key] = map[uint64]time.Duration{}
			}
			if s, ok := granted[o.Key][o.Token]; !ok || o.Start < s {
				granted[o.Key][o.Token] = o.Start
			}
			terms = append(terms, o)
		case o.Unknown:
			unknowns[o.Key] = append(unknowns[o.Key], o.Start)
		}
	}
	r.Terms = len(terms)
	// inFlight reports whether client c had an acquire of key in flight
	// at instant at.
	inFlight := func(c int, key string, at time.Duration) bool {
		for _, o := range h {
			if o.Kind == Acquire && o.Client == c && o.Key == key && o.Start < at && o.End > at {
				return true
			}
		}
		return false
	}

	// Each observer's reports in the order received (stable: one
	// observer's reports are recorded in order).
	byObs := map[int][]Observation{}
	for _, o := range obs {
		byObs[o.Observer] = append(byObs[o.Observer], o)
	}
	obsIDs := make([]int, 0, len(byObs))
	for id := range byObs {
		obsIDs = append(obsIDs, id)
	}
	sort.Ints(obsIDs)
	reported := map[int]map[uint64]bool{} // observer → tokens reported
	phantomAt := map[string]map[uint64]time.Duration{}
	phantomBy := map[string]map[uint64]string{} // the value reported with it
	for _, id := range obsIDs {
		os := byObs[id]
		sort.SliceStable(os, func(i, j int) bool { return os[i].At < os[j].At })
		reported[id] = map[uint64]bool{}
		var top uint64
		for _, o := range os {
			if !o.Present {
				r.Vacant++
				continue
			}
			r.Reports++
			if o.Token <= top {
				r.OrderViolations++
				example("observer %d of %q: token %d at %v after token %d", id, o.Key, o.Token, o.At, top)
			}
			top = max(top, o.Token)
			reported[id][o.Token] = true
			if s, ok := granted[o.Key][o.Token]; ok && s < o.At {
				continue
			}
			if phantomAt[o.Key] == nil {
				phantomAt[o.Key] = map[uint64]time.Duration{}
			}
			if at, ok := phantomAt[o.Key][o.Token]; !ok || o.At < at {
				phantomAt[o.Key][o.Token] = o.At
				if phantomBy[o.Key] == nil {
					phantomBy[o.Key] = map[uint64]string{}
				}
				phantomBy[o.Key][o.Token] = o.Value
			}
		}
	}
	// Reality: a phantom is explained by a distinct Unknown acquire of its
	// key that started before its first report.
	for _, k := range sortedKeys(phantomAt) {
		type ph struct {
			token uint64
			at    time.Duration
		}
		var ps []ph
		for t, at := range phantomAt[k] {
			ps = append(ps, ph{t, at})
		}
		sort.Slice(ps, func(i, j int) bool { return ps[i].at < ps[j].at || ps[i].at == ps[j].at && ps[i].token < ps[j].token })
		us := unknowns[k]
		sort.Slice(us, func(i, j int) bool { return us[i] < us[j] })
		used, avail := 0, 0
		for _, p := range ps {
			r.PhantomTokens++
			for avail < len(us) && us[avail] < p.at {
				avail++
			}
			if used < avail {
				used++
				r.PhantomsExplained++
				continue
			}
			if c, err := strconv.Atoi(phantomBy[k][p.token]); err == nil && inFlight(c, k, p.at) {
				r.PhantomsInFlight++
			}
			example("key %q: token %d (value %q) reported at %v was granted to nobody (no OK grant, no unknown acquire left to explain it)", k, p.token, phantomBy[k][p.token], p.at)
		}
	}

	// Completeness.
	type obsKey struct {
		observer int
		key      string
	}
	sess := map[obsKey][]WatchSession{}
	for _, s := range sessions {
		sess[obsKey{s.Observer, s.Key}] = append(sess[obsKey{s.Observer, s.Key}], s)
		r.Watches++
		if s.Broken {
			r.Rewatches++
		}
	}
	observersOf := map[string][]int{}
	for ok := range sess {
		observersOf[ok.key] = append(observersOf[ok.key], ok.observer)
	}
	for _, ids := range observersOf {
		sort.Ints(ids)
	}
	// reportedIn reports whether observer id reported a granted token
	// above t during [from, to] (a phantom proves no order).
	reportedIn := func(id int, key string, t uint64, from, to time.Duration) bool {
		for _, o := range byObs[id] {
			if s, ok := granted[key][o.Token]; ok && s < o.At && o.Present && o.Token > t && o.At >= from && o.At <= to {
				return true
			}
		}
		return false
	}
	for _, t := range terms {
		for _, id := range observersOf[t.Key] {
			if reported[id][t.Token] {
				r.Seen++
				continue
			}
			ss := sess[obsKey{id, t.Key}]
			inSync, covered := false, false
			for _, s := range ss {
				if s.Synced <= 0 || s.Synced > t.Start {
					continue
				}
				inSync = true
				if !s.Broken || reportedIn(id, t.Key, t.Token, s.Synced, s.End) {
					covered = true
					break
				}
			}
			switch {
			case covered:
				r.Unseen++
				example("observer %d of %q never reported token %d (acquire %v–%v), with its watch in sync before and unbroken", id, t.Key, t.Token, t.Start, t.End)
			case inSync:
				r.MissedDuringRewatch++
			default:
				r.BeforeSync++
			}
		}
	}
	return r
}
