package linearize

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

// TestCheckGCPause is Kleppmann's scenario with a correct lock: client 0 is
// paused past its TTL, client 1 gets the lock and writes, client 0 wakes up
// and writes with its old token. The lock history is linearizable, the
// beliefs overlap, the fenced store rejects the stale write, the unfenced one
// applies it.
func TestCheckGCPause(t *testing.T) {
	hist := H(
		Acq(0, "k", 0, 1, 1, 100, 97),
		// client 0 pauses from 2 to 300 ms
		Acq(1, "k", 50, 120, 2, 100, 147),
		Wr(1, "k", 121, 122, 2, true, 1), Wr(1, "k", 121, 122, 2, false, 1),
		WrRejected(0, "k", 300, 301, 1, true), Wr(0, "k", 300, 302, 1, false, 2),
		RelNotHeld(0, "k", 303, 304, 1),
		Rel(1, "k", 130, 131, 2),
		Acq(2, "k", 310, 311, 3, 100, 407),
		Wr(2, "k", 312, 313, 3, true, 2), Wr(2, "k", 312, 313, 3, false, 3),
		Rel(2, "k", 320, 321, 3),
	)
	faults := []check.Fault{{Name: "pause client 0", Start: D(2), Heal: D(300)}}
	r := Check(hist, faults, check.Options{})
	if r.Overlaps != 1 || len(r.OverlapExamples) != 1 || !strings.Contains(r.OverlapExamples[0], "client 0") {
		t.Errorf("overlaps = %d %q, want 1 naming client 0", r.Overlaps, r.OverlapExamples)
	}
	if r.StaleWritesAccepted != 0 || r.StaleWritesRejected != 1 || r.UnfencedConflicts != 1 {
		t.Errorf("stale writes = accepted %d, rejected %d, unfenced %d; want 0, 1, 1",
			r.StaleWritesAccepted, r.StaleWritesRejected, r.UnfencedConflicts)
	}
	if !r.Linearizable || r.LinearizabilityResult != porcupine.Ok {
		t.Errorf("linearizable = %v (%v), want true", r.Linearizable, r.LinearizabilityResult)
	}
	if len(r.LinearizabilityKeys) != 1 || r.LinearizabilityKeys[0].Key != "k" || r.LinearizabilityUnknownKeys != 0 {
		t.Errorf("per-key verdicts %+v, unknown %d; want one Ok for k", r.LinearizabilityKeys, r.LinearizabilityUnknownKeys)
	}
	if !r.TokensChecked || r.TokensReused != 0 || r.TokenRegressions != 0 {
		t.Errorf("tokens checked %v: reused %d, regressions %d; want 0, 0", r.TokensChecked, r.TokensReused, r.TokenRegressions)
	}
	// grants at 1, 120, 311 in [0, 321 ms]: no gap beyond 1 s.
	if r.Unavailable != 0 {
		t.Errorf("unavailable = %v, want 0", r.Unavailable)
	}
	if want := []time.Duration{11 * Ms}; !slices.Equal(r.Recoveries, want) || r.MaxRecovery != 11*Ms || !r.Recovered[0] {
		t.Errorf("recoveries = %v (max %v, recovered %v), want [11ms]", r.Recoveries, r.MaxRecovery, r.Recovered)
	}
}

// TestCheckBrokenLock is a lock that granted a live lease twice and let a
// stale write through its fence.
func TestCheckBrokenLock(t *testing.T) {
	hist := H(
		Acq(0, "k", 0, 1, 2, 1000, 900),
		Acq(1, "k", 5, 6, 1, 1000, 900), // lower token, while client 0 holds
		Wr(0, "k", 10, 11, 2, true, 1),
		Wr(1, "k", 12, 13, 1, true, 2),
		Rel(0, "k", 20, 21, 2),
		Rel(1, "k", 22, 23, 1),
	)
	r := Check(hist, nil, check.Options{LinearizabilityTimeout: -1})
	if r.Overlaps != 1 || r.StaleWritesAccepted != 1 || r.Linearizable || r.LinearizabilityResult != porcupine.Illegal {
		t.Errorf("overlaps %d, stale accepted %d, linearizable %v (%v); want 1, 1, false (Illegal)",
			r.Overlaps, r.StaleWritesAccepted, r.Linearizable, r.LinearizabilityResult)
	}
	if len(r.Recoveries) != 0 || r.MaxRecovery != 0 {
		t.Errorf("recoveries without faults: %v", r.Recoveries)
	}
}
