package raftlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// The primitives in raftlock beyond the conformance suite: how
// they are committed (one entry per burst of shared grants, one per
// multi-key grant), what a leader change keeps, watches on followers, and
// the bounds of watches and shared holders.

// events reads n events of ch (failing on an error event or a close).
func events(t *testing.T, ch <-chan lock.Event, n int) []lock.Event {
	t.Helper()
	var out []lock.Event
	timeout := time.After(20 * time.Second)
	for len(out) < n {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("watch closed after %d of %d events: %v", len(out), n, out)
			}
			if ev.Type == lock.EventError {
				t.Fatalf("watch broke after %d of %d events: %v", len(out), n, ev.Err)
			}
			out = append(out, ev)
		case <-timeout:
			t.Fatalf("%d of %d events within 20 s: %v", len(out), n, out)
		}
	}
	return out
}

func raftIndex(ev lock.Event) uint64 { return ev.Revision >> revisionShift }

func watchKey(t *testing.T, n *Node, key string) <-chan lock.Event {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	// The hub directly: Watch opens watches on the leader only, and the
	// follower tests watch each node's own applied state.
	ch, err := n.watches.watch(ctx, n.session, key)
	if err != nil {
		t.Fatalf("Watch(%q) on node %s: %v", key, n.ID(), err)
	}
	return ch
}

// TestSharedBurstOneEntry: readers queued behind a writer are all granted
// in the entry that releases the writer (their grants carry its raft
// index), not one entry each.
func TestSharedBurstOneEntry(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key, readers = "rw", 8
	writer, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	ch := watchKey(t, l, key)
	events(t, ch, 2) // the writer, synced
	got := make(chan *lock.Lease, readers)
	for i := range readers {
		go func() {
			lease, err := l.NewSession().Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared, Owner: fmt.Sprint("reader-", i)})
			if err != nil {
				t.Error(err)
			}
			got <- lease
		}()
	}
	awaitWaiting(t, l, key, readers)
	if err := l.Release(ctx, writer); err != nil {
		t.Fatal(err)
	}
	evs := events(t, ch, 1+readers)
	if evs[0].Type != lock.EventReleased || evs[0].Token != writer.Token {
		t.Fatalf("first event %+v, want the writer's release", evs[0])
	}
	for _, ev := range evs[1:] {
		if ev.Type != lock.EventGranted || ev.Mode != lock.ModeShared {
			t.Errorf("event %+v, want a shared grant", ev)
		}
		if raftIndex(ev) != raftIndex(evs[0]) {
			t.Errorf("a reader was granted at raft index %d, the writer released at %d: the burst took more than one entry", raftIndex(ev), raftIndex(evs[0]))
		}
	}
	for range readers {
		if lease := <-got; lease == nil || lease.Token <= writer.Token || lease.Mode != lock.ModeShared {
			t.Errorf("reader's lease %+v", lease)
		}
	}
}

// TestMultiKeyOneEntry: AcquireAll of 8 keys commits one entry: every
// key's grant carries the same raft index.
func TestMultiKeyOneEntry(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	keys := make([]string, 8)
	chs := make([]<-chan lock.Event, len(keys))
	for i := range keys {
		keys[i] = fmt.Sprint("multi-", i)
		chs[i] = watchKey(t, l, keys[i])
		events(t, chs[i], 1)
	}
	// One key is held: the multi-key waiter waits, holding none.
	blocker, err := l.Acquire(ctx, keys[5], lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	events(t, chs[5], 1)
	res := make(chan []*lock.Lease, 1)
	go func() {
		leases, err := l.NewSession().AcquireAll(ctx, keys, lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Error(err)
		}
		res <- leases
	}()
	awaitWaiting(t, l, keys[0], 1)
	if err := l.Release(ctx, blocker); err != nil {
		t.Fatal(err)
	}
	leases := <-res
	if len(leases) != len(keys) {
		t.Fatalf("%d leases", len(leases))
	}
	var index uint64
	for i, ch := range chs {
		if i == 5 {
			events(t, ch, 1) // the blocker's release
		}
		ev := events(t, ch, 1)[0]
		if ev.Type != lock.EventGranted || ev.Token != leases[i].Token {
			t.Fatalf("key %d: %+v, want the grant of token %d", i, ev, leases[i].Token)
		}
		if i == 0 {
			index = raftIndex(ev)
		} else if raftIndex(ev) != index {
			t.Errorf("key %d granted at raft index %d, key 0 at %d: not one entry", i, raftIndex(ev), index)
		}
	}
	if err := l.ReleaseAll(ctx, leases); err != nil {
		t.Fatal(err)
	}
	var rel []uint64
	for _, ch := range chs {
		ev := events(t, ch, 1)[0]
		if ev.Type != lock.EventReleased {
			t.Fatalf("%+v after ReleaseAll", ev)
		}
		rel = append(rel, raftIndex(ev))
	}
	if slices.Min(rel) != slices.Max(rel) {
		t.Errorf("ReleaseAll took entries %v, want one", rel)
	}
}

// TestLeaderChangeKeepsPrimitives: a new leader keeps the shared holders
// (and extends them) and a lock-delay that began under the old leader: a
// TryAcquire in it is refused with *lock.DelayedError, and a waiter is
// granted only once it ends.
func TestLeaderChangeKeepsPrimitives(t *testing.T) {
	c := startCluster(t, 3)
	old := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var readers []*lock.Lease
	for i := range 2 {
		r, err := old.NewSession().Acquire(ctx, "shared", lock.AcquireOptions{TTL: 30 * time.Second, Permits: 3, Owner: fmt.Sprint("r", i)})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	const delay = 6 * time.Second
	ch := watchKey(t, old, "delayed")
	events(t, ch, 1)
	if _, err := old.Acquire(ctx, "delayed", lock.AcquireOptions{TTL: 300 * time.Millisecond, LockDelay: delay, Owner: "crashed"}); err != nil {
		t.Fatal(err)
	}
	if evs := events(t, ch, 2); evs[1].Type != lock.EventExpired {
		t.Fatalf("events %+v, want a grant and its expiry", evs)
	}
	until := old.fsm.Delay("delayed")
	if until == 0 {
		t.Fatal("no lock-delay recorded after the expiry")
	}
	if err := old.await(old.raft.LeadershipTransfer(), 10*time.Second); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	var nl *Node
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		for _, n := range followers(c, old) {
			if n.IsLeader() {
				nl = n
			}
		}
		if nl != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("no new leader")
		}
	}
	info, err := nl.Inspect(ctx, "shared")
	if err != nil {
		t.Fatal(err)
	}
	if info.Mode != lock.ModeShared || info.Permits != 3 || len(info.Holders) != 2 || info.Holders[0].Token != readers[0].Token || info.Holders[1].Token != readers[1].Token {
		t.Errorf("new leader's Inspect: %+v", info)
	}
	if time.Now().UnixNano() >= until {
		t.Skip("the leader change took longer than the lock-delay: nothing left to test")
	}
	var de *lock.DelayedError
	if l, err := nl.TryAcquire(ctx, "delayed", lock.AcquireOptions{TTL: time.Minute}); !errors.As(err, &de) || !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire in the lock-delay under the new leader: %+v, %v; want a *lock.DelayedError", l, err)
	}
	next, err := nl.Acquire(ctx, "delayed", lock.AcquireOptions{TTL: time.Minute, Owner: "next"})
	if err != nil {
		t.Fatal(err)
	}
	if now := time.Now().UnixNano(); now < until {
		t.Errorf("granted %v before the lock-delay's end", time.Duration(until-now))
	}
	// The readers renew through the new leader.
	for _, r := range readers {
		if err := nl.Renew(ctx, r, time.Minute); err != nil {
			t.Errorf("renewing reader %d under the new leader: %v", r.Token, err)
		}
	}
	_ = next
}

// TestWatchOnFollowers: watches on the leader and on both followers see
// the same events, with the same revisions, in the same order.
func TestWatchOnFollowers(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const key = "watched"
	var chs []<-chan lock.Event
	for _, n := range c.Nodes() {
		ch := watchKey(t, n, key)
		events(t, ch, 1)
		chs = append(chs, ch)
	}
	a, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: "a", Value: []byte("va")})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	r1, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.NewSession().Acquire(ctx, key, lock.AcquireOptions{TTL: 300 * time.Millisecond, Mode: lock.ModeShared, Owner: "r2"}); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, r1); err != nil {
		t.Fatal(err)
	}
	want := []lock.EventType{lock.EventGranted, lock.EventReleased, lock.EventGranted, lock.EventGranted, lock.EventReleased, lock.EventExpired}
	var first []lock.Event
	for i, ch := range chs {
		evs := events(t, ch, len(want))
		for j, ev := range evs {
			if ev.Type != want[j] {
				t.Errorf("node %d event %d: %v, want %v", i, j, ev.Type, want[j])
			}
			if j > 0 && ev.Revision <= evs[j-1].Revision {
				t.Errorf("node %d event %d: revision %d after %d", i, j, ev.Revision, evs[j-1].Revision)
			}
		}
		if i == 0 {
			first = evs
			continue
		}
		for j := range evs {
			a, b := first[j], evs[j]
			if a.Type != b.Type || a.Token != b.Token || a.Revision != b.Revision || a.Owner != b.Owner || string(a.Value) != string(b.Value) || a.Mode != b.Mode {
				t.Errorf("node %s event %d: %+v; node %s saw %+v", c.Nodes()[i].ID(), j, b, c.Nodes()[0].ID(), a)
			}
		}
	}
}

// TestWatchBounds: a watch that falls Config.WatchBuffer events behind
// ends with lock.ErrWatchOverflow; past Config.MaxWatchers a Watch is
// refused; Close of the session ends its watches (no error event); a
// node's shutdown ends its watches with an error event.
func TestWatchBounds(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.WatchBuffer = 4; cfg.MaxWatchers = 2 })
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	slow := watchKey(t, l, "busy")
	for range 3 {
		lease, err := l.Acquire(ctx, "busy", lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
	var got []lock.Event
	for ev := range slow {
		got = append(got, ev)
	}
	if n := len(got); n == 0 || got[n-1].Type != lock.EventError || !errors.Is(got[n-1].Err, lock.ErrWatchOverflow) {
		t.Fatalf("a watch 6 events behind with a buffer of 4: %+v; want an EventError with ErrWatchOverflow, then the close", got)
	}
	if len(got) > 4+2 {
		t.Errorf("%d events buffered, bound 4 (+ synced + error)", len(got))
	}

	s := l.NewSession()
	w1, err := s.Watch(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Watch(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Watch(ctx, "c"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("a third watch on a node with MaxWatchers 2: %v, want ErrUnavailable", err)
	}
	s.Close()
	for ev := range w1 {
		if ev.Type == lock.EventError {
			t.Errorf("EventError after the session's Close: %v", ev.Err)
		}
	}
	if _, err := s.Watch(ctx, "a"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("Watch on a closed session: %v", err)
	}
	f := followers(c, l)[0]
	fw := watchKey(t, f, "a")
	events(t, fw, 1)
	for _, srv := range c.Servers {
		if srv.Node == f {
			srv.Shutdown()
		}
	}
	var last lock.Event
	for ev := range fw {
		last = ev
	}
	if last.Type != lock.EventError || !errors.Is(last.Err, lock.ErrClosed) {
		t.Errorf("last event of a watch on a node that shut down: %+v, want an EventError matching ErrClosed", last)
	}
}

// TestSharedWantedAndForceRelease: a writer queued behind two readers
// makes both of them wanted; ForceRelease frees both at once, and the
// writer is granted in that entry.
func TestSharedWantedAndForceRelease(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var readers []*lock.Lease
	for i := range 2 {
		r, err := l.NewSession().Acquire(ctx, "k", lock.AcquireOptions{TTL: time.Hour, Mode: lock.ModeShared, Owner: fmt.Sprint("r", i)})
		if err != nil {
			t.Fatal(err)
		}
		readers = append(readers, r)
	}
	// A third reader is compatible: nobody is wanted.
	r3, err := l.NewSession().Acquire(ctx, "k", lock.AcquireOptions{TTL: time.Hour, Mode: lock.ModeShared, Owner: "r3"})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range readers {
		select {
		case <-r.Wanted():
			t.Fatal("a reader was told it is wanted by another reader")
		default:
		}
	}
	writer := make(chan *lock.Lease, 1)
	go func() {
		w, err := l.NewSession().Acquire(ctx, "k", lock.AcquireOptions{TTL: time.Minute, Owner: "w"})
		if err != nil {
			t.Error(err)
		}
		writer <- w
	}()
	for _, r := range append(readers, r3) {
		select {
		case <-r.Wanted():
		case <-time.After(10 * time.Second):
			t.Fatalf("reader %d not told that a writer waits", r.Token)
		}
	}
	if err := l.ForceRelease(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	w := <-writer
	if w == nil || w.Token <= r3.Token {
		t.Fatalf("writer after the forced release: %+v", w)
	}
	for _, r := range readers {
		if err := l.Renew(ctx, r, time.Hour); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("a force-released reader renewed: %v", err)
		}
	}
}

// TestMaxSharedHolders: past Config.MaxSharedHolders a shared TryAcquire
// is refused and an Acquire waits for a holder to leave.
func TestMaxSharedHolders(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.MaxSharedHolders = 2 })
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	opts := lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared}
	a, err := l.Acquire(ctx, "k", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.Acquire(ctx, "k", opts); err != nil {
		t.Fatal(err)
	}
	if lease, err := l.TryAcquire(ctx, "k", opts); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("a third reader past MaxSharedHolders 2: %+v, %v", lease, err)
	}
	third := make(chan error, 1)
	go func() {
		_, err := l.NewSession().Acquire(ctx, "k", opts)
		third <- err
	}()
	awaitWaiting(t, l, "k", 1)
	select {
	case err := <-third:
		t.Fatalf("a third reader returned while two held: %v", err)
	default:
	}
	if err := l.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	if err := <-third; err != nil {
		t.Fatal(err)
	}
}
