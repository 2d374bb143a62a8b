package election_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
	"github.com/lockgate/lockgate/lock/locktest"
)

const wait = 5 * time.Second

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), wait)
	t.Cleanup(cancel)
	return c
}

func locker(t *testing.T, s *locktest.MemStore) *locktest.MemLocker {
	l := s.NewLocker()
	t.Cleanup(func() { l.Close() })
	return l
}

func next(t *testing.T, ch <-chan election.Leader) election.Leader {
	t.Helper()
	select {
	case ld, ok := <-ch:
		if !ok {
			t.Fatal("Observe's channel closed")
		}
		return ld
	case <-time.After(wait):
		t.Fatal("Observe sent nothing")
	}
	return election.Leader{}
}

// campaignAsync campaigns for key with value on l in a goroutine; the
// channel yields the leadership once won (nil, the test failed, if the
// campaign failed).
func campaignAsync(t *testing.T, l lock.Locker, key, value string) <-chan *election.Leadership {
	won := make(chan *election.Leadership, 1)
	go func() {
		e, err := election.Campaign(ctx(t), l, key, []byte(value))
		if err != nil {
			t.Error(err)
		}
		won <- e
	}()
	return won
}

func wantLeader(t *testing.T, ld election.Leader, e *election.Leadership, value string) {
	t.Helper()
	if !ld.Present || ld.Token != e.Token() || string(ld.Value) != value {
		t.Fatalf("leader %+v, want token %d with value %q", ld, e.Token(), value)
	}
}

func wantNone(t *testing.T, ld election.Leader) {
	t.Helper()
	if ld.Present {
		t.Fatalf("leader %+v, want none", ld)
	}
}

// Resign hands leadership to the next campaigner, with a higher token, and
// ends the resigned leadership's Done.
func TestCampaignResignHandover(t *testing.T) {
	s := locktest.NewMemStore()
	a, b := locker(t, s), locker(t, s)
	first, err := election.Campaign(ctx(t), a, "e", []byte("a"), election.WithTTL(time.Second), election.WithOwner("node-a"))
	if err != nil {
		t.Fatal(err)
	}
	won := campaignAsync(t, b, "e", "b")
	awaitWaiter(t, b)
	select {
	case <-won:
		t.Fatal("a second leader was elected while the first led")
	default:
	}
	cur, err := election.Current(ctx(t), b, "e")
	if err != nil || !cur.Present || cur.Owner != "node-a" || cur.Token != first.Token() || string(cur.Value) != "a" {
		t.Fatalf("Current = %+v, %v; want node-a's leadership", cur, err)
	}
	if err := election.Resign(ctx(t), first); err != nil {
		t.Fatal(err)
	}
	select {
	case <-first.Done():
		if !errors.Is(first.Err(), lock.ErrReleased) {
			t.Errorf("resigned leadership's Err: %v", first.Err())
		}
	default:
		t.Error("Done open after Resign")
	}
	second := <-won
	if second == nil || second.Token() <= first.Token() {
		t.Fatalf("successor %+v, want a token above %d", second, first.Token())
	}
	if err := first.Resign(ctx(t)); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Resign: %v, want %v", err, lock.ErrNotHeld)
	}
	second.Resign(ctx(t))
	if cur, err := election.Current(ctx(t), a, "e"); err != nil || cur.Present {
		t.Errorf("Current after every resign = %+v, %v; want none", cur, err)
	}
}

// A leader whose Locker closes without resigning loses leadership at its
// TTL: Done closes, and a campaigner waiting behind it wins.
func TestLeadershipLostOnCrash(t *testing.T) {
	s := locktest.NewMemStore()
	a, b := s.NewLocker(), locker(t, s)
	e, err := election.Campaign(ctx(t), a, "e", nil, election.WithTTL(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	a.Close()
	select {
	case <-e.Done():
	case <-time.After(wait):
		t.Fatal("leadership's Done did not close after its Locker was closed")
	}
	f, err := election.Campaign(ctx(t), b, "e", nil)
	if err != nil {
		t.Fatalf("no new leader after the old one's TTL: %v", err)
	}
	if f.Token() <= e.Token() {
		t.Errorf("new leader's token %d, want > %d", f.Token(), e.Token())
	}
}

// Observe reports none, then each leader and each vacancy in order, and
// starts with the current leader when there is one; it closes when its
// context ends.
func TestObserve(t *testing.T) {
	s := locktest.NewMemStore()
	a, b, o := locker(t, s), locker(t, s), locker(t, s)
	octx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ch, err := election.Observe(octx, o, "e")
	if err != nil {
		t.Fatal(err)
	}
	wantNone(t, next(t, ch))
	ea, err := election.Campaign(ctx(t), a, "e", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, next(t, ch), ea, "a")

	// A second observer starts with the current leader.
	late, err := election.Observe(ctx(t), o, "e")
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, next(t, late), ea, "a")

	won := campaignAsync(t, b, "e", "b")
	awaitWaiter(t, o)
	ea.Resign(ctx(t))
	eb := <-won
	wantNone(t, next(t, ch))
	wantLeader(t, next(t, ch), eb, "b")
	wantNone(t, next(t, late))
	wantLeader(t, next(t, late), eb, "b")
	cancel()
	select {
	case ld, ok := <-ch:
		if ok {
			t.Errorf("Observe sent %+v after its context ended", ld)
		}
	case <-time.After(wait):
		t.Error("Observe's channel not closed after its context ended")
	}
}

func TestObserveUnsupported(t *testing.T) {
	l := locker(t, locktest.NewMemStoreWithFeatures(lock.AllFeatures&^lock.FeatureWatch))
	if _, err := election.Observe(ctx(t), l, "e"); !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("Observe without watch: %v, want %v", err, lock.ErrUnsupported)
	}
}

// flaky breaks its first watch with an EventError after a few events.
type flaky struct {
	*locktest.MemLocker
	watches    atomic.Int32
	breakAfter int
}

func (f *flaky) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	real, err := f.MemLocker.Watch(ctx, key)
	if err != nil || f.watches.Add(1) > 1 {
		return real, err
	}
	out := make(chan lock.Event, 8)
	go func() {
		defer close(out)
		for range f.breakAfter {
			ev, ok := <-real
			if !ok {
				return
			}
			out <- ev
		}
		out <- lock.Event{Type: lock.EventError, Key: key, Err: lock.ErrWatchOverflow}
	}()
	return out, nil
}

// When the watch breaks, Observe watches again and goes on, without
// sending the leader it already sent a second time.
func TestObserveRewatches(t *testing.T) {
	s := locktest.NewMemStore()
	a, b := locker(t, s), locker(t, s)
	o := &flaky{MemLocker: locker(t, s), breakAfter: 2}
	ea, err := election.Campaign(ctx(t), a, "e", []byte("a"))
	if err != nil {
		t.Fatal(err)
	}
	ch, err := election.Observe(ctx(t), o, "e")
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, next(t, ch), ea, "a") // holder, synced: then the watch breaks
	for o.watches.Load() < 2 {
		time.Sleep(time.Millisecond)
	}
	ea.Resign(ctx(t))
	wantNone(t, next(t, ch)) // not a's leadership again
	eb, err := election.Campaign(ctx(t), b, "e", []byte("b"))
	if err != nil {
		t.Fatal(err)
	}
	wantLeader(t, next(t, ch), eb, "b")
}

// awaitWaiter waits until a campaigner is queued on "e".
func awaitWaiter(t *testing.T, l lock.Locker) {
	t.Helper()
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
		if info, err := l.Inspect(ctx(t), "e"); err == nil && info.Waiters == 1 {
			return
		}
	}
	t.Fatal("no campaigner queued")
}
