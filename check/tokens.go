package check

import (
	"fmt"
	"sort"
	"time"
)

// Tokens checks the fencing tokens of the granted acquires (OK Acquires) of
// h, per key, against every token acknowledged for that key:
//
//   - reused counts grants whose token an earlier grant of the key already
//     carried: a token acknowledged n times counts n − 1. A lock must never
//     hand out a token twice (for instance after a restart that lost its
//     counter), or the fence cannot tell the two holders apart.
//   - regressions counts grants whose token is lower than that of a grant of
//     the same key that had returned before this one was requested (End <
//     Start: real-time order). Grants that overlap in time may be
//     linearized either way and are not compared.
//
// The strings describe up to maxExamples of them (≤ 0: 5). It runs in
// O(n log n). A backend without fencing tokens has nothing to check here:
// the campaign's synthetic tokens increase by construction.
func Tokens(h History, maxExamples int) (reused, regressions int, examples []string) {
	if maxExamples <= 0 {
		maxExamples = 5
	}
	byKey := make(map[string][]Op)
	for _, o := range h {
		if o.Kind == Acquire && o.OK {
			byKey[o.Key] = append(byKey[o.Key], o)
		}
	}
	note := func(format string, args ...any) {
		if len(examples) < maxExamples {
			examples = append(examples, fmt.Sprintf(format, args...))
		}
	}
	for _, k := range sortedKeys(byKey) {
		gs := byKey[k]
		// In request order; ties by return, so that the reports are
		// reproducible.
		sort.SliceStable(gs, func(i, j int) bool {
			if gs[i].Start != gs[j].Start {
				return gs[i].Start < gs[j].Start
			}
			return gs[i].End < gs[j].End
		})
		first := make(map[uint64]Op, len(gs))
		for _, g := range gs {
			if f, ok := first[g.Token]; ok {
				reused++
				note("key %q: token %d granted again: %v after %v", k, g.Token, g, f)
				continue
			}
			first[g.Token] = g
		}
		// sweep in request order with the grants that had returned before
		// each request: the highest token among them must be below it.
		ends := make([]int, len(gs))
		for i := range ends {
			ends[i] = i
		}
		sort.SliceStable(ends, func(i, j int) bool { return gs[ends[i]].End < gs[ends[j]].End })
		var (
			high    uint64
			highOp  Op
			returns = 0
		)
		for _, g := range gs {
			for returns < len(ends) && gs[ends[returns]].End < g.Start {
				if r := gs[ends[returns]]; r.Token > high {
					high, highOp = r.Token, r
				}
				returns++
			}
			if high > g.Token {
				regressions++
				note("key %q: token %d granted after token %d had been: %v after %v", k, g.Token, high, g, highOp)
			}
		}
	}
	return reused, regressions, examples
}

// KindAvailability is what clients saw of the lock service around the
// faults of one kind.
type KindAvailability struct {
	Fault string
	// Count is how many faults of the kind were injected.
	Count int
	// ToGrant is, for each fault, the time from its start (the holder's
	// death, for a kill or a pause of the servers) to the earliest
	// completion of a grant requested at or after that start: how long a
	// client that asked once the fault struck waited for a lock (the
	// lock-delay). A fault after which no grant was requested and
	// granted counts up to the end of the history and in Unserved.
	ToGrantMedian, ToGrantMax time.Duration
	// Recovery is, for each fault, RecoveryTimes: from its heal to the
	// next grant completed; a fault not recovered counts up to the end of
	// the history and in Unrecovered.
	RecoveryMedian, RecoveryMax time.Duration
	Unserved, Unrecovered       int
}

// AvailabilityByKind gives the lock-delay and the recovery of each fault
// kind (see KindAvailability), in the order the kinds first occur in
// faults.
func AvailabilityByKind(h History, faults []Fault) []KindAvailability {
	recs, recovered := RecoveryTimes(h, faults)
	delays, served := GrantDelays(h, faults)
	var out []KindAvailability
	index := map[string]int{}
	var toGrant, recovery [][]time.Duration
	for i, f := range faults {
		j, ok := index[f.Name]
		if !ok {
			j = len(out)
			index[f.Name] = j
			out = append(out, KindAvailability{Fault: f.Name})
			toGrant, recovery = append(toGrant, nil), append(recovery, nil)
		}
		out[j].Count++
		toGrant[j] = append(toGrant[j], delays[i])
		recovery[j] = append(recovery[j], recs[i])
		if !served[i] {
			out[j].Unserved++
		}
		if !recovered[i] {
			out[j].Unrecovered++
		}
	}
	for j := range out {
		out[j].ToGrantMedian, out[j].ToGrantMax = medianMax(toGrant[j])
		out[j].RecoveryMedian, out[j].RecoveryMax = medianMax(recovery[j])
	}
	return out
}

// GrantDelays returns, for each fault, the time from its Start to the
// earliest End of an OK acquire whose Start is at or after the fault's
// Start, and whether there was one (else: up to the end of the history, a
// lower bound).
func GrantDelays(h History, faults []Fault) (delays []time.Duration, served []bool) {
	type grant struct{ start, end time.Duration }
	var gs []grant
	for _, o := range h {
		if o.Kind == Acquire && o.OK {
			gs = append(gs, grant{o.Start, o.End})
		}
	}
	sort.Slice(gs, func(i, j int) bool { return gs[i].start < gs[j].start })
	// soonest[i] is the earliest End among gs[i:].
	soonest := make([]time.Duration, len(gs))
	for i := len(gs) - 1; i >= 0; i-- {
		soonest[i] = gs[i].end
		if i+1 < len(gs) {
			soonest[i] = min(soonest[i], soonest[i+1])
		}
	}
	_, end := h.Span()
	delays, served = make([]time.Duration, len(faults)), make([]bool, len(faults))
	for i, f := range faults {
		j := sort.Search(len(gs), func(j int) bool { return gs[j].start >= f.Start })
		if j < len(gs) {
			delays[i], served[i] = soonest[j]-f.Start, true
			continue
		}
		delays[i] = max(0, end-f.Start)
	}
	return delays, served
}

// medianMax returns the median (the lower middle of an even count) and the
// largest of ds.
func medianMax(ds []time.Duration) (median, largest time.Duration) {
	if len(ds) == 0 {
		return 0, 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[(len(s)-1)/2], s[len(s)-1]
}
