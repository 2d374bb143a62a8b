package linearize

import (
	"strings"
	"testing"
	"time"

	"github.com/anishathalye/porcupine"
)

// TestKeyBudgets: a search that cannot finish (40 acquires waiting at once,
// checked with the plain model, which tries every subset of them) is not
// checked, for time when its time runs out and for memory, at once, when
// the heap is over its budget; one that finishes is decided.
func TestKeyBudgets(t *testing.T) {
	explodes := operations(waitingThroughOutage(40), nil, true)
	decided := Operations(waitingThroughOutage(40), nil)

	wd := newWatchdog(0)
	defer wd.stop()
	v := checkKey(explodes, 200*time.Millisecond, time.Time{}, wd)
	if v.Result != porcupine.Unknown || !strings.HasPrefix(v.NotChecked, "time: ") {
		t.Errorf("out of time: %v, %q; want Unknown, time: …", v.Result, v.NotChecked)
	}
	// The same budget's worth of a search that finishes (tens of
	// milliseconds alone, seconds on a loaded machine under -race).
	if v := checkKey(decided, 30*time.Second, time.Time{}, wd); v.Result != porcupine.Ok || v.NotChecked != "" {
		t.Errorf("a key decided in time: %v, %q", v.Result, v.NotChecked)
	}
	if v := checkKey(decided, time.Minute, time.Now().Add(-time.Second), wd); v.Result != porcupine.Unknown || !strings.HasPrefix(v.NotChecked, "time: ") {
		t.Errorf("no time left: %v, %q", v.Result, v.NotChecked)
	}

	// A heap over budget: the running search is given up within the
	// watchdog's period, long before its 30 s.
	defer func(f func() uint64) { heapSample = f }(heapSample)
	heapSample = func() uint64 { return 5 << 30 }
	mem := newWatchdog(1 << 30)
	defer mem.stop()
	start := time.Now()
	v = checkKey(explodes, 30*time.Second, time.Time{}, mem)
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("the search was given up after %v, want within a second or so", el)
	}
	if v.Result != porcupine.Unknown || !strings.HasPrefix(v.NotChecked, "memory: ") || !strings.Contains(v.NotChecked, "1024 MiB budget") {
		t.Errorf("over the memory budget: %v, %q; want Unknown, memory: … 1024 MiB budget", v.Result, v.NotChecked)
	}
}
