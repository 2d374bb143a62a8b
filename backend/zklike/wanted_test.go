package zklike

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// wantedWithin fails the test unless lease's Wanted closes within d.
func wantedWithin(t *testing.T, lease *lock.Lease, d time.Duration, why string) {
	t.Helper()
	select {
	case <-lease.Wanted():
	case <-time.After(d):
		t.Fatalf("lease %q (token %d) not wanted within %v although %s", lease.Key, lease.Token, d, why)
	}
}

func notWantedNow(t *testing.T, lease *lock.Lease, why string) {
	t.Helper()
	if lease.IsWanted() {
		t.Errorf("lease %q (token %d) wanted although %s", lease.Key, lease.Token, why)
	}
}

// TestWantedLocalWaiterNoRoundTrip: a waiter in the holder's own Locker
// marks the holder wanted before it sends anything: with etcd paused
// (SIGSTOP), the waiter's requests hang, yet the holder hears it.
func TestWantedLocalWaiterNoRoundTrip(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	l := newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	held, err := l.Acquire(ctx, "local", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	e.Members[0].Pause()
	wctx, cancel := context.WithCancel(ctx)
	waiter := acquireAsync(wctx, l, "local", lock.AcquireOptions{TTL: time.Minute})
	wantedWithin(t, held, 5*time.Second, "a caller of its own Locker waits, etcd paused")
	cancel()
	e.Members[0].Resume()
	if r := <-waiter; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: lease %v, err %v; want context.Canceled", r.lease, r.err)
	}
	if err := l.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
}

// TestWantedNotByTryAcquire: a TryAcquire that finds the key held does
// not mark its holder; a real waiter after it (on another key held by the
// same Locker, so that its event comes after the try's in the watch)
// shows that the watch has passed the try.
func TestWantedNotByTryAcquire(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b := newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	held, err := a.Acquire(ctx, "try", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	marker, err := a.Acquire(ctx, "try-marker", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	var heldErr *lock.HeldError
	if _, err := b.TryAcquire(ctx, "try", lock.AcquireOptions{TTL: time.Minute}); !errors.As(err, &heldErr) {
		t.Fatalf("TryAcquire of a held key: %v, want a *lock.HeldError", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	waiter := acquireAsync(wctx, b, "try-marker", lock.AcquireOptions{TTL: time.Minute})
	wantedWithin(t, marker, 5*time.Second, "a caller waits for its key")
	notWantedNow(t, held, "only a TryAcquire asked for its key")
	cancel()
	<-waiter
}

// TestWantedWaiterGaveUp: the holder stays wanted after its waiter gave
// up (Wanted never reopens), and the next holder, granted with nobody
// waiting, is not wanted: the gone waiter's key does not count.
func TestWantedWaiterGaveUp(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b, c := newLocker(t, e, nil), newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	held, err := a.Acquire(ctx, "gave-up", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	waiter := acquireAsync(wctx, b, "gave-up", lock.AcquireOptions{TTL: time.Minute})
	wantedWithin(t, held, 5*time.Second, "a caller in another Locker waits")
	cancel()
	if r := <-waiter; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: %v", r.err)
	}
	if !held.IsWanted() {
		t.Fatal("Wanted reopened after the waiter gave up")
	}
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	next, err := c.Acquire(ctx, "gave-up", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	notWantedNow(t, next, "it was granted with nobody waiting")
	c.Release(ctx, next)
}

// TestWantedRebuiltLeaseJoinsOnRenew: a lease rebuilt from its grant (as
// the gateway renews copies) and renewed through another Locker is told
// too: at once if a caller already waits, else when one comes.
func TestWantedRebuiltLeaseJoinsOnRenew(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, g, b := newLocker(t, e, nil), newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)

	// A caller waits before the copy is renewed.
	held, err := a.Acquire(ctx, "rebuilt-1", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	waiter := acquireAsync(wctx, b, "rebuilt-1", lock.AcquireOptions{TTL: time.Minute})
	awaitWaiters(t, a, "rebuilt-1", 1)
	cp := rebuild(held)
	if err := g.Renew(ctx, cp, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !cp.IsWanted() {
		t.Error("a rebuilt lease renewed while a caller waits is not wanted after its Renew")
	}
	cancel()
	<-waiter
	// A copy renewed where its grant is held joins the grant's entry: it
	// is wanted (the grant was), although nobody waits any more, which a
	// fresh read would not show.
	cp3 := rebuild(held)
	if err := a.Renew(ctx, cp3, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !cp3.IsWanted() {
		t.Error("a copy of a wanted grant renewed where the grant is held is not wanted")
	}
	// Releasing the grant takes every copy out of the register, though
	// the copies live on to their deadlines.
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	a.wanted.mu.Lock()
	n := a.wanted.n
	a.wanted.mu.Unlock()
	if n != 0 {
		t.Errorf("%d leases registered after the grant's release, want 0", n)
	}

	// A caller comes after the copy's renewal.
	held2, err := a.Acquire(ctx, "rebuilt-2", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	cp2 := rebuild(held2)
	if err := g.Renew(ctx, cp2, time.Minute); err != nil {
		t.Fatal(err)
	}
	notWantedNow(t, cp2, "nobody waits yet")
	wctx2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	waiter2 := acquireAsync(wctx2, b, "rebuilt-2", lock.AcquireOptions{TTL: time.Minute})
	wantedWithin(t, cp2, 5*time.Second, "a caller waits after its renewal")
	cancel2()
	<-waiter2
}

// TestWantedAfterCompaction: when a watch's history is compacted away
// while it is down, the creations it missed are found by a rescan of its
// range, and their holders marked.
func TestWantedAfterCompaction(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a := newLocker(t, e, nil)
	raw := rawClient(t, e.Endpoints...)
	ctx := bg(t, time.Minute)
	held, err := a.Acquire(ctx, "compacted", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	h := a.wanted
	h.mu.Lock()
	w := h.dirs[a.dir("compacted")]
	w.stop() // the watch goes down; a new generation ignores what it still delivers
	h.gens++
	w.gen = h.gens
	gen := w.gen
	h.mu.Unlock()

	// A contender key appears behind the holder, then etcd forgets it was created.
	put, err := raw.Put(ctx, a.dir("compacted")+fmt.Sprintf("%032x", 1), "{}")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Put(ctx, "unrelated", "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(ctx, put.Header.Revision+1, clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	notWantedNow(t, held, "the watch is down")

	rctx, cancel := context.WithCancel(a.ctx)
	h.mu.Lock()
	w.stop = cancel
	h.mu.Unlock()
	done := make(chan struct{})
	go func() { defer close(done); h.run(rctx, w, gen) }()
	defer func() { cancel(); <-done }()
	wantedWithin(t, held, 5*time.Second, "a contender key was created while the watch was down")
}

// TestWantedNoGoroutinePerLease: holding many leases adds no goroutine
// per lease (a few directories' watches and one prefix watch serve them
// all), and the register empties as they are released.
//
// Not parallel: the other tests' goroutines would blur the count.
func TestWantedNoGoroutinePerLease(t *testing.T) {
	e := testenv.StartEtcd(t, 1)
	a := newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	first, err := a.Acquire(ctx, "many-0", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	before := runtime.NumGoroutine()
	leases := []*lock.Lease{first}
	for i := 1; i <= n; i++ {
		lease, err := a.Acquire(ctx, fmt.Sprintf("many-%d", i), lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		leases = append(leases, lease)
	}
	// Other tests run in parallel in this process: allow some slack, far
	// below one goroutine per lease.
	if grown := runtime.NumGoroutine() - before; grown > n/4 {
		t.Errorf("holding %d more leases started %d goroutines", n, grown)
	}
	for _, lease := range leases {
		if err := a.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
	a.wanted.mu.Lock()
	defer a.wanted.mu.Unlock()
	if a.wanted.n != 0 || len(a.wanted.held) != 0 {
		t.Errorf("register after every release: %d leases in %d directories, want none", a.wanted.n, len(a.wanted.held))
	}
}
