package kit_test

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func TestDeadlineFormula(t *testing.T) {
	sent := time.Now()
	for _, tc := range []struct {
		ttl    time.Duration
		factor float64
		want   time.Duration // deadline − sent
	}{
		{10 * time.Second, 0, 10*time.Second - 100*time.Millisecond - lock.DriftFloor},
		{10 * time.Second, 0.05, 10*time.Second - 500*time.Millisecond - lock.DriftFloor},
		{time.Second, 0, time.Second - 10*time.Millisecond - lock.DriftFloor},
		{time.Millisecond, 0, 0}, // eaten by the drift floor: over at once
	} {
		if got := kit.DeadlineFor(sent, tc.ttl, tc.factor).Sub(sent); got != tc.want {
			t.Errorf("DeadlineFor(ttl %v, factor %v) = sent+%v, want sent+%v", tc.ttl, tc.factor, got, tc.want)
		}
	}
}
