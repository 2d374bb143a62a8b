package raftlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Prefix watches (lock.PrefixWatcher): every key under a prefix, in
// applied order, no holders first; the bounds of key watches.

// change is what a test expects of one event: its type and key.
type change struct {
	typ lock.EventType
	key string
}

func changesOf(evs []lock.Event) []change {
	out := make([]change, len(evs))
	for i, ev := range evs {
		out[i] = change{ev.Type, ev.Key}
	}
	return out
}

// TestWatchPrefixEvents: a prefix watch opened while a key under it is
// held starts with EventSynced (no holder), then sees the grants, releases
// and expiries of the keys under its prefix — and of no other key — in
// applied order with increasing revisions; the "" watch sees every key's.
func TestWatchPrefixEvents(t *testing.T) {
	c := startCluster(t, 1)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	acquire := func(key string, ttl time.Duration) *lock.Lease {
		t.Helper()
		lease, err := l.NewSession().Acquire(ctx, key, lock.AcquireOptions{TTL: ttl, Owner: "o-" + key, Value: []byte("v-" + key)})
		if err != nil {
			t.Fatalf("acquire %q: %v", key, err)
		}
		return lease
	}
	release := func(lease *lock.Lease) {
		t.Helper()
		if err := l.Release(ctx, lease); err != nil {
			t.Fatalf("release %q: %v", lease.Key, err)
		}
	}
	before := acquire("orders/held", time.Minute)

	orders, err := l.WatchPrefix(ctx, "orders/")
	if err != nil {
		t.Fatal(err)
	}
	all, err := lock.WatchPrefix(ctx, l, "") // through the lock package's helper
	if err != nil {
		t.Fatal(err)
	}
	syncs := [2]lock.Event{events(t, orders, 1)[0], events(t, all, 1)[0]}
	for i, ev := range syncs {
		if ev.Type != lock.EventSynced {
			t.Fatalf("watch %d: first event %+v, want synced (no holders first)", i, ev)
		}
		if raftIndex(ev) == 0 {
			t.Errorf("watch %d: synced at raft index 0, before the held key's grant", i)
		}
	}
	if syncs[0].Key != "orders/" || syncs[1].Key != "" {
		t.Errorf("synced keys %q, %q; want the prefixes", syncs[0].Key, syncs[1].Key)
	}

	o1 := acquire("orders/1", time.Minute)
	x1 := acquire("other/1", time.Minute)
	nx := acquire("ordersX", time.Minute) // shares "orders" but not "orders/"
	o2 := acquire("orders/2", time.Minute)
	release(o1)
	release(x1)
	release(before)
	release(nx)
	release(o2)
	acquire("orders/3", 300*time.Millisecond) // expires

	wantOrders := []change{
		{lock.EventGranted, "orders/1"}, {lock.EventGranted, "orders/2"}, {lock.EventReleased, "orders/1"},
		{lock.EventReleased, "orders/held"}, {lock.EventReleased, "orders/2"}, {lock.EventGranted, "orders/3"},
		{lock.EventExpired, "orders/3"},
	}
	wantAll := []change{
		{lock.EventGranted, "orders/1"}, {lock.EventGranted, "other/1"}, {lock.EventGranted, "ordersX"},
		{lock.EventGranted, "orders/2"}, {lock.EventReleased, "orders/1"}, {lock.EventReleased, "other/1"},
		{lock.EventReleased, "orders/held"}, {lock.EventReleased, "ordersX"}, {lock.EventReleased, "orders/2"},
		{lock.EventGranted, "orders/3"}, {lock.EventExpired, "orders/3"},
	}
	for i, tc := range []struct {
		ch   <-chan lock.Event
		want []change
	}{{orders, wantOrders}, {all, wantAll}} {
		got := events(t, tc.ch, len(tc.want))
		if fmt.Sprint(changesOf(got)) != fmt.Sprint(tc.want) {
			t.Errorf("watch %d saw\n%v\nwant\n%v", i, changesOf(got), tc.want)
		}
		prev := syncs[i].Revision
		for j, ev := range got {
			if ev.Revision <= prev {
				t.Errorf("watch %d event %d (%v %q): revision %d after %d", i, j, ev.Type, ev.Key, ev.Revision, prev)
			}
			prev = ev.Revision
			if ev.Token == 0 {
				t.Errorf("watch %d event %d: no token", i, j)
			}
			if ev.Type == lock.EventGranted && (ev.Owner != "o-"+ev.Key || string(ev.Value) != "v-"+ev.Key) {
				t.Errorf("watch %d event %d: grant %+v, not its key's holder", i, j, ev)
			}
		}
	}
	// Nothing more: the expiry was the last change.
	select {
	case ev := <-orders:
		t.Errorf("an event after the last change: %+v", ev)
	default:
	}
}

// TestWatchPrefixBounds: a prefix watch counts toward Config.MaxWatchers,
// ends with lock.ErrWatchOverflow after Config.WatchBuffer unread events,
// is opened on the leader only, checks its prefix, and ends without an
// error event when its session closes.
func TestWatchPrefixBounds(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.WatchBuffer = 4; cfg.MaxWatchers = 2 })
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	slow, err := l.WatchPrefix(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		lease, err := l.Acquire(ctx, fmt.Sprint("busy-", i), lock.AcquireOptions{TTL: time.Minute})
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
		t.Fatalf("a prefix watch 6 events behind with a buffer of 4: %+v; want an EventError with ErrWatchOverflow, then the close", got)
	}
	if len(got) > 4+2 {
		t.Errorf("%d events buffered, bound 4 (+ synced + error)", len(got))
	}
	if n := l.watches.open(); n != 0 {
		t.Errorf("%d watches open after the overflow, want 0", n)
	}

	if _, err := l.WatchPrefix(ctx, "a\x00"); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("WatchPrefix with a control character: %v, want %v", err, lock.ErrInvalidKey)
	}
	if _, err := followers(c, l)[0].WatchPrefix(ctx, ""); !errors.Is(err, lock.ErrNotLeader) {
		t.Errorf("WatchPrefix on a follower: %v, want %v", err, lock.ErrNotLeader)
	}
	// Through the cluster's Locker: it finds the leader.
	cw, err := lock.WatchPrefix(ctx, c.Locker(), "p/")
	if err != nil {
		t.Fatalf("WatchPrefix through the cluster's Locker: %v", err)
	}
	events(t, cw, 1)

	s := l.NewSession()
	w1, err := s.WatchPrefix(ctx, "a/")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := l.WatchPrefix(ctx, "b/"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("a third watch on a node with MaxWatchers 2: %v, want ErrUnavailable", err)
	}
	if _, err := l.Watch(ctx, "b"); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("a key watch beside two prefix watches with MaxWatchers 2: %v, want ErrUnavailable", err)
	}
	s.Close()
	for ev := range w1 {
		if ev.Type == lock.EventError {
			t.Errorf("EventError after the session's Close: %v", ev.Err)
		}
	}
	if _, err := s.WatchPrefix(ctx, "a/"); !errors.Is(err, lock.ErrClosed) {
		t.Errorf("WatchPrefix on a closed session: %v", err)
	}
	if n := l.watches.open(); n != 1 {
		t.Errorf("%d watches open, want 1 (the cluster Locker's)", n)
	}
}
