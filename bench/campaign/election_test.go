package campaign

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/internal/benchtest"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// watchHook passes everything to its MemLocker but its watches' events,
// which a broken watch rewrites (nil: dropped).
type watchHook struct {
	*locktest.MemLocker
	event func(n int, ev lock.Event) *lock.Event
}

func (w *watchHook) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	src, err := w.MemLocker.Watch(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make(chan lock.Event, 64)
	go func() {
		defer close(out)
		n := 0
		for ev := range src {
			if ev.Type == lock.EventGranted {
				n++
			}
			if p := w.event(n, ev); p != nil {
				out <- *p
			}
		}
	}()
	return out, nil
}

// TestChaosElection runs the election campaign against the reference
// MemStore, which keeps every promise, and against broken locks that each
// of its checks must catch: two leaders at once (an exclusive acquire
// granted as a shared one), a watch that drops every third grant (an
// observer misses terms with its watch in sync and unbroken), and one
// that reports tokens no grant carried (phantoms).
func TestChaosElection(t *testing.T) {
	dropsGrants := func(l *locktest.MemLocker) lock.Locker {
		return &watchHook{MemLocker: l, event: func(n int, ev lock.Event) *lock.Event {
			if ev.Type == lock.EventGranted && n%3 == 0 {
				return nil
			}
			return &ev
		}}
	}
	phantoms := func(l *locktest.MemLocker) lock.Locker {
		return &watchHook{MemLocker: l, event: func(n int, ev lock.Event) *lock.Event {
			if ev.Type == lock.EventGranted && n%3 == 0 {
				ev.Token += 1000 * lock.Token(n)
			}
			return &ev
		}}
	}
	cases := []struct {
		name string
		wrap func(*locktest.MemLocker) lock.Locker
		want string // the failure's prefix; "" for none
	}{
		{"correct", nil, ""},
		{"two leaders", asShared, "overlaps"},
		{"a watch that drops grants", dropsGrants, "observer completeness"},
		{"a watch that reports tokens never granted", phantoms, "observer reality"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := memCampaign(t, ChaosConfig{Mode: ChaosElection, TTL: 500 * time.Millisecond, Duration: 4 * time.Second}, tc.wrap)
			benchtest.LogTable(t, rep)
			el := rep.Election
			if el == nil || el.Terms != rep.Cycles || el.Reports == 0 || el.Watches != 2 || el.ObserversPerKey != DefaultObservers {
				t.Fatalf("election report %+v (cycles %d): want every term, reports, and one watch per observer", el, rep.Cycles)
			}
			failures := rep.Failures()
			if tc.want == "" {
				if len(failures) > 0 || rep.Overlaps != 0 || el.Violations != 0 || el.Seen != 2*el.Terms || el.StaleAccepted() != 0 {
					t.Errorf("a correct lock failed: %q (%+v)", failures, el)
				}
				if el.Resigned == 0 || el.Crashed == 0 {
					t.Errorf("%d resigned, %d crashed: the campaign should do both", el.Resigned, el.Crashed)
				}
				return
			}
			if !slices.ContainsFunc(failures, func(f string) bool { return strings.HasPrefix(f, tc.want) }) {
				t.Errorf("the broken lock passed %s: failures %q", tc.want, failures)
			}
		})
	}
}

// StaleAccepted is a test's shorthand: nothing in the election report
// counts stale writes (the campaign's StaleWritesAccepted does).
func (el *ChaosElectionReport) StaleAccepted() int { return 0 }

// TestChaosElectionPause: a leader paused past its lease writes with its
// old term after the next leader was elected: two leaders by its own
// clock, which the overlap checker must count and the fence reject.
func TestChaosElectionPause(t *testing.T) {
	rep := memCampaign(t, ChaosConfig{Mode: ChaosElection, Faults: []string{faults.ClientPause}, Duration: 3 * time.Second}, nil)
	benchtest.LogTable(t, rep)
	if rep.Election.Paused == 0 || rep.Overlaps == 0 || !rep.Valid || rep.StaleWritesAccepted != 0 || rep.StaleWritesRejected == 0 {
		t.Errorf("paused leaders: %q, %+v", rep.Verdicts(), rep.Election)
	}
	if f := rep.Failures(); len(f) != 0 {
		t.Errorf("a pause breaks exclusion by design: %q", f)
	}
}

// TestChaosElectionUnsupported: a backend without watches is refused.
func TestChaosElectionUnsupported(t *testing.T) {
	store := locktest.NewMemStoreWithFeatures(lock.AllFeatures &^ lock.FeatureWatch)
	cfg := ChaosConfig{Backend: provision.Raft, Mode: ChaosElection, TTL: time.Second, Duration: time.Second, Dir: t.TempDir()}
	_, err := RunChaosLockers(context.Background(), cfg, func(int) (lock.Locker, error) { return store.NewLocker(), nil })
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("%v, want an error matching lock.ErrUnsupported", err)
	}
}

// TestChaosElectionCheck: the report's checks over recorded histories —
// two leaders whose terms overlap by the first one's own deadline fail,
// the same terms one after the other pass — and a history file keeps the
// observers' records, so that `lockgate-bench check` finds the same verdicts.
func TestChaosElectionCheck(t *testing.T) {
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	term := func(c int, tok uint64, start, end, deadline int) check.Op {
		return check.Op{Client: c, Key: "election/0", Kind: check.Acquire, OK: true, Token: tok, TTL: time.Second,
			Start: ms(start), End: ms(end), Deadline: ms(deadline)}
	}
	obs := []check.Observation{
		{Observer: 0, Key: "election/0", At: ms(12), Present: true, Token: 1},
		{Observer: 0, Key: "election/0", At: ms(1300), Present: true, Token: 2},
	}
	watches := []check.WatchSession{{Observer: 0, Key: "election/0", Start: ms(1), Synced: ms(5), End: ms(3000)}}
	report := func(h check.History) *ChaosReport {
		rep := &ChaosReport{Backend: provision.Raft, Caps: provision.InfoOf(provision.Raft).Caps, Holds: ChaosElection, Election: &ChaosElectionReport{Keys: 1, ObserversPerKey: 1},
			history: h, observations: obs, watches: watches, DurationS: 3}
		rep.check()
		return rep
	}
	// The first leader crashed (no resign): it leads until its deadline,
	// 1,010 ms; the second was granted at 900 ms.
	bad := report(check.History{term(0, 1, 10, 12, 1010), term(1, 2, 20, 900, 1900)})
	if bad.Overlaps != 1 || len(bad.Failures()) == 0 || !strings.HasPrefix(bad.Failures()[0], "overlaps") {
		t.Errorf("two leaders at once passed: %q", bad.Verdicts())
	}
	good := report(check.History{term(0, 1, 10, 12, 1010), term(1, 2, 20, 1290, 2290)})
	if good.Overlaps != 0 || len(good.Failures()) != 0 || good.Election.Seen != 2 || good.Election.Terms != 2 {
		t.Errorf("one leader at a time failed: %q", good.Verdicts())
	}

	// An observer that missed the second term, then a history file.
	obs = obs[:1]
	missed := report(good.history)
	if missed.Election.Unseen != 1 || len(missed.Failures()) != 1 {
		t.Fatalf("a missed term passed: %q", missed.Verdicts())
	}
	path := filepath.Join(t.TempDir(), "h.json")
	if err := missed.SaveHistory(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	again := loaded.Recheck()
	if !slices.Equal(again.Verdicts(), missed.Verdicts()) {
		t.Errorf("rechecked:\n%q\nwant\n%q", again.Verdicts(), missed.Verdicts())
	}
	var js bytes.Buffer
	if err := again.WriteJSON(&js); err != nil || !bytes.Contains(js.Bytes(), []byte(`"unseen": 1`)) {
		t.Errorf("JSON: %v\n%s", err, js.String())
	}
	os.Remove(path)
}

// raftElectionCampaign runs a 15 s election campaign on three `lockgate
// node` processes under faults and logs its table; it fails the test
// unless the campaign did enough to judge (a fault, eight terms — a quiet
// machine gives 25–30, a loaded CI machine beside another suite gave 16 —
// and reports from the observers).
func raftElectionCampaign(t *testing.T, faults ...string) *ChaosReport {
	t.Helper()
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rep, err := RunChaos(ctx, ChaosConfig{Backend: provision.Raft, Mode: ChaosElection, Faults: faults, Duration: 15 * time.Second, Seed: 1,
		Lockgate: testenv.BuildLockgate(t), Log: &log, Progress: benchtest.Writer(t)})
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	benchtest.LogTable(t, rep)
	if len(rep.Injected) < 1 || rep.Election.Terms < 8 || rep.Election.Reports < rep.Election.Terms {
		t.Fatalf("%d faults, %d terms, %d reports: the campaign did too little to judge", len(rep.Injected), rep.Election.Terms, rep.Election.Reports)
	}
	return rep
}

// TestChaosElectionRaftSmoke: raftlock elects one leader at a time through
// leader kills, and its observers report every term in order (or miss it
// only while re-watching).
func TestChaosElectionRaftSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15 s fault campaign")
	}
	rep := raftElectionCampaign(t, faults.Kill)
	el := rep.Election
	if rep.Overlaps != 0 || rep.StaleWritesAccepted != 0 || !linearizableEnough(t, rep) || !rep.Valid || el.Violations != 0 || len(brokenPromises(t, rep)) != 0 {
		t.Errorf("raftlock broke a promise of its elections: %q", rep.Verdicts())
	}
	if el.Seen == 0 || el.Seen+el.MissedDuringRewatch+el.BeforeSync != 2*el.Terms {
		t.Errorf("%+v: every term is seen or missed by each of its key's 2 observers", el)
	}
}

// TestChaosElectionRaftPause: a leader paused past its lease on raftlock
// wakes and writes with its old term while another leads: the overlap
// checker must see two leaders (the campaign is otherwise invalid), and
// the fence must reject the late writes it can order.
func TestChaosElectionRaftPause(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15 s fault campaign")
	}
	rep := raftElectionCampaign(t, faults.ClientPause)
	if rep.Election.Paused == 0 || rep.Overlaps == 0 || !rep.Valid || rep.StaleWritesAccepted != 0 || len(rep.Failures()) != 0 {
		t.Errorf("paused raftlock leaders: %q", rep.Verdicts())
	}
}
