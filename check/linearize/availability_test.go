package linearize

import (
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
	. "github.com/lockgate/lockgate/check/internal/checktest"
)

func TestAvailability(t *testing.T) {
	s := float64(time.Second / Ms)
	hist := H(
		Acq(0, "a", 0, 0.5*s, 1, s, s),
		Rel(0, "a", 0.6*s, 0.7*s, 1),
		Acq(1, "b", 0.2*s, 1*s, 1, s, s),
		AcqFail(2, "a", 1.1*s, 2.9*s, s), // failures do not count
		Acq(2, "a", 2.9*s, 3*s, 2, s, s),
		Acq(3, "c", 3.1*s, 3.2*s, 1, s, s),
		AcqUnknown(0, "c", 3.3*s, 5.9*s, s),
		Acq(1, "b", 5.9*s, 6*s, 2, s, s),
		Rel(1, "b", 6.9*s, 7*s, 2),
	)
	faults := []check.Fault{
		{Name: "kill", Start: D(1 * s), Heal: D(2 * s)},
		{Name: "pause", Start: D(3 * s), Heal: D(3.2 * s)}, // a grant completes at the heal itself
		{Name: "partition", Start: D(6.1 * s), Heal: D(6.5 * s)},
		{Name: "late", Start: D(6.9 * s), Heal: D(8 * s)}, // healed after the history ended
	}
	// Grants complete at 0.5 1 3 3.2 6 s in the span [0, 7 s]: gaps longer
	// than 1 s are 1→3 (2 s) and 3.2→6 (2.8 s); 6→7 is exactly 1 s.
	unavail, rec := check.Availability(hist, faults, time.Second)
	if want := 4800 * Ms; unavail != want {
		t.Errorf("unavailable = %v, want %v", unavail, want)
	}
	wantRec := []time.Duration{time.Second, 0, 500 * Ms, 0}
	if !slices.Equal(rec, wantRec) {
		t.Errorf("recoveries = %v, want %v", rec, wantRec)
	}
	_, recovered := check.RecoveryTimes(hist, faults)
	if want := []bool{true, true, false, false}; !slices.Equal(recovered, want) {
		t.Errorf("recovered = %v, want %v", recovered, want)
	}

	// With a 500 ms gap, 6→7 counts too (0→0.5 and 0.5→1 are exactly 500 ms).
	if unavail, _ := check.Availability(hist, nil, 500*Ms); unavail != 5800*Ms {
		t.Errorf("unavailable (500 ms gap) = %v, want 5.8s", unavail)
	}
	// Gap ≤ 0 means 1 s.
	if unavail, _ := check.Availability(hist, nil, 0); unavail != 4800*Ms {
		t.Errorf("unavailable (default gap) = %v, want 4.8s", unavail)
	}

	r := Check(hist, faults, check.Options{})
	if r.Unavailable != 4800*Ms || !slices.Equal(r.Recoveries, wantRec) || r.MaxRecovery != time.Second {
		t.Errorf("Check: unavailable %v, recoveries %v, max %v", r.Unavailable, r.Recoveries, r.MaxRecovery)
	}
	if want := []bool{true, true, false, false}; !slices.Equal(r.Recovered, want) {
		t.Errorf("Check: recovered = %v, want %v", r.Recovered, want)
	}
}

func TestAvailabilityNoGrant(t *testing.T) {
	hist := H(AcqFail(0, "a", 1000, 4000, 1000), AcqUnknown(1, "a", 2000, 3500, 1000))
	unavail, rec := check.Availability(hist, []check.Fault{{Name: "kill", Heal: D(1500)}}, time.Second)
	if unavail != 3*time.Second {
		t.Errorf("unavailable = %v, want the whole span 3s", unavail)
	}
	if len(rec) != 1 || rec[0] != 2500*Ms {
		t.Errorf("recoveries = %v, want [2.5s]", rec)
	}
	if u, rec := check.Availability(nil, nil, time.Second); u != 0 || len(rec) != 0 {
		t.Errorf("empty history: %v %v", u, rec)
	}
}
