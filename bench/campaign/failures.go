package campaign

import (
	"fmt"

	"github.com/lockgate/lockgate/bench/faults"
)

// breaks reports whether a fault injected in the campaign is expected to
// break mutual exclusion on its backend (Fault.BreaksSafety); with
// serverSide, only such a fault of the servers, after which the lock's
// own history need not be linearizable (a client pause leaves it so).
func (rep *ChaosReport) breaks(serverSide bool) bool {
	for _, ev := range rep.Injected {
		if f, err := faults.ByName(ev.Fault); err == nil && f.BreaksSafety(rep.Backend) && !(serverSide && f.Name == faults.ClientPause) {
			return true
		}
	}
	return false
}

// Failures lists the promises the campaign saw broken, by checker name;
// empty when it passed: an overlap where no fault injected was expected
// to break mutual exclusion, a stale write the fence accepted, a token
// granted twice or going back, a lock history that is not linearizable
// (or whose check ran out of time) where no server fault was expected to
// break the lock.
func (rep *ChaosReport) Failures() []string {
	var out []string
	if rep.Overlaps > 0 && !rep.breaks(false) {
		out = append(out, fmt.Sprintf("overlaps: %d, and no fault injected was expected to break mutual exclusion on %s", rep.Overlaps, rep.Backend))
	}
	if rep.StaleWritesAccepted > 0 {
		out = append(out, fmt.Sprintf("stale_writes_accepted: %d: the fenced store took writes behind a newer token", rep.StaleWritesAccepted))
	}
	if rep.TokensReused > 0 {
		out = append(out, fmt.Sprintf("tokens_reused: %d grants carried a token already granted for their key", rep.TokensReused))
	}
	if rep.TokenRegressions > 0 {
		out = append(out, fmt.Sprintf("token_regressions: %d grants carried a token lower than an earlier grant's", rep.TokenRegressions))
	}
	if !rep.Linearizable && !rep.breaks(true) {
		out = append(out, rep.linearizabilityFailures()...)
	}
	out = append(out, rep.jointFailures()...)
	out = append(out, rep.readFailures()...)
	return append(out, rep.electionFailures()...)
}
