package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// TestWatchPrefix: through a raftlock gateway, a prefix watch starts with
// EventSynced (no holders) and then sees the changes of the keys under
// its prefix, each Event with its own Key, not of the others; a gateway
// without the feature answers unsupported.
func TestWatchPrefix(t *testing.T) {
	rc := startRaft(t)
	raftLeader(t, rc)
	c := newClient(t, apiAddrs(rc), client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := c.Acquire(ctx, "wp/held", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := lock.WatchPrefix(ctx, c, "wp/")
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Type != lock.EventSynced || ev.Key != "wp/" {
		t.Fatalf("first event %+v, want synced of wp/ (no holders)", ev)
	}
	for _, k := range []string{"wp/a", "other", "wp/b"} {
		l, err := c.Acquire(ctx, k, lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	want := []struct {
		typ lock.EventType
		key string
	}{{lock.EventGranted, "wp/a"}, {lock.EventReleased, "wp/a"}, {lock.EventGranted, "wp/b"}, {lock.EventReleased, "wp/b"}, {lock.EventReleased, "wp/held"}}
	for i, w := range want {
		ev := <-ch
		if ev.Type != w.typ || ev.Key != w.key || ev.Token == 0 {
			t.Errorf("event %d: %+v, want %v of %s", i, ev, w.typ, w.key)
		}
	}

	// A gateway over a Locker that is no PrefixWatcher.
	_, addr := startGatewayOver(t, locktest.NewMemStore().NewLocker())
	m := newClient(t, []string{addr}, client.Options{})
	if _, err := m.WatchPrefix(ctx, ""); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("WatchPrefix through a gateway without watchprefix: %v, want %v", err, lock.ErrUnsupported)
	}
	if _, err := m.WatchPrefix(ctx, "a\x00"); !errors.Is(err, lock.ErrInvalidKey) {
		t.Errorf("WatchPrefix of a malformed prefix: %v, want %v", err, lock.ErrInvalidKey)
	}
}
