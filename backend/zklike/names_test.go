package zklike

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestNamesReused: a Locker acquiring and releasing one key in a loop puts
// its contender keys under one name, as concurrency.Mutex does, so etcd's
// index of the lock's directory does not grow by a tombstone per
// acquisition (a range over the directory walks every name it ever held
// until a compaction). Every grant still has its own token, a stale Lease
// of the name is refused without touching the live grant, and two live
// contenders of one Locker never share a name.
func TestNamesReused(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	l := newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	const key = "reused"
	first, err := l.Acquire(ctx, key, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, first); err != nil {
		t.Fatal(err)
	}
	prev := first
	for i := 0; i < 5; i++ {
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if lease.Handle != first.Handle {
			t.Errorf("grant %d: handle %s, want the released name %s reused", i, lease.Handle, first.Handle)
		}
		if lease.Token <= prev.Token {
			t.Errorf("grant %d: token %d, not above the previous grant's %d", i, lease.Token, prev.Token)
		}
		// The previous grant of the same name is refused, and the live
		// one is untouched.
		wantErr(t, "Renew of a stale grant of the name", l.Renew(ctx, rebuild(prev), 0), lock.ErrNotHeld)
		wantErr(t, "Release of a stale grant of the name", l.Release(ctx, rebuild(prev)), lock.ErrNotHeld)
		if err := l.Renew(ctx, lease, 0); err != nil {
			t.Fatalf("grant %d: Renew after a stale release: %v", i, err)
		}
		if err := l.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
		prev = lease
	}
	// One name in the directory's history: no tombstone per acquisition.
	resp, err := l.Client().Get(ctx, l.dir(key), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithRev(int64(prev.Token)))
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 1 || string(resp.Kvs[0].Key) != l.dir(key)+first.Handle {
		t.Errorf("directory at the last grant: %d keys %v, want the one reused name", resp.Count, resp.Kvs)
	}

	// Two live contenders of one Locker: distinct names, and the waiter
	// is granted when the holder releases.
	held, err := l.Acquire(ctx, key, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, l, key, lock.AcquireOptions{})
	awaitWaiters(t, l, key, 1)
	if err := l.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	r := <-waiter
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.Handle == held.Handle {
		t.Errorf("waiter and holder share the name %s", held.Handle)
	}
	if err := l.Release(ctx, r.lease); err != nil {
		t.Fatal(err)
	}

	// A cancelled waiter's name, deleted when it gave up, is reused too;
	// one given by the caller (AcquireOptions.Handle) never is.
	held, err = l.Acquire(ctx, key, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithCancel(ctx)
	gaveUp := acquireAsync(cctx, l, key, lock.AcquireOptions{})
	awaitWaiters(t, l, key, 1)
	keys, err := l.Client().Get(ctx, l.dir(key), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var cancelled string
	for _, kv := range keys.Kvs {
		if h := string(kv.Key)[len(l.dir(key)):]; h != held.Handle {
			cancelled = h
		}
	}
	cancel()
	if r := <-gaveUp; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v, want context.Canceled", r.err)
	}
	if err := l.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	mine := lock.NewHandle()
	own, err := l.Acquire(ctx, key, lock.AcquireOptions{Handle: mine})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, own); err != nil {
		t.Fatal(err)
	}
	a, err := l.Acquire(ctx, key, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	b := acquireAsync(ctx, l, key, lock.AcquireOptions{})
	awaitWaiters(t, l, key, 1)
	if a.Handle == mine {
		t.Errorf("the caller's own handle was reused for another call")
	}
	if err := l.Release(ctx, a); err != nil {
		t.Fatal(err)
	}
	r = <-b
	if r.err != nil {
		t.Fatal(r.err)
	}
	if r.lease.Handle == mine {
		t.Errorf("the caller's own handle was reused for another call")
	}
	if got := []string{a.Handle, r.lease.Handle}; !slices.Contains(got, cancelled) || !slices.Contains(got, held.Handle) {
		t.Errorf("handles %v, want the released %s and the cancelled waiter's %s reused", got, held.Handle, cancelled)
	}
	l.Release(ctx, r.lease)
}
