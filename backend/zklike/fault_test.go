package zklike

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

type result struct {
	lease *lock.Lease
	err   error
}

func acquireAsync(ctx context.Context, l *Locker, key string, opts lock.AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, opts)
		ch <- result{lease, err}
	}()
	return ch
}

// awaitWaiters waits until Inspect reports n waiters on key.
func awaitWaiters(t *testing.T, l *Locker, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		info, err := l.Inspect(bg(t, 10*time.Second), key)
		if err == nil && info.Waiters == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) never reported %d waiters (last: %+v, %v)", key, n, info, err)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// rebuild is a fresh Lease for the same grant, as a restarted client would
// make from what it stored: only the backend can tell it no longer holds.
func rebuild(l *lock.Lease) *lock.Lease {
	return kit.NewLease(kit.Grant{Key: l.Key, Owner: l.Owner, Token: l.Token, Handle: l.Handle, TTL: time.Minute, Sent: time.Now()})
}

func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got %v, want an error matching %v", what, err, target)
	}
}

// TestKeepAlivesPaused: the holder's keep-alives stop (the process is
// paused past its TTL, as far as etcd can tell), so etcd expires its lease
// and the lock passes to the waiter; the holder's Done closes, never later
// than the instant the waiter is granted, and after it resumes its
// renewals and releases are refused.
func TestKeepAlivesPaused(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	holder, other := newLocker(t, e, nil), newLocker(t, e, nil)
	const key = "paused"
	held, err := holder.Acquire(bg(t, 10*time.Second), key, lock.AcquireOptions{TTL: etcdTTL, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(bg(t, time.Minute), other, key, lock.AcquireOptions{TTL: time.Minute})
	awaitWaiters(t, other, key, 1)

	// Renewals keep it held for several TTLs while keep-alives flow.
	select {
	case r := <-waiter:
		t.Fatalf("waiter granted while the holder renewed: %+v", r)
	case <-held.Done():
		t.Fatalf("auto-renewed lease ended: %v", held.Err())
	case <-time.After(2 * etcdTTL):
	}

	resume := holder.suspendKeepAlives()
	var r result
	select {
	case r = <-waiter:
	case <-time.After(etcdTTL + 10*time.Second):
		resume()
		t.Fatal("the lock did not pass to the waiter after the holder's keep-alives stopped")
	}
	granted := time.Now()
	if r.err != nil {
		resume()
		t.Fatalf("waiter: %v", r.err)
	}
	if granted.Before(held.Deadline()) {
		t.Errorf("waiter granted at %v, before the paused holder's deadline %v", granted, held.Deadline())
	}
	if r.lease.Token <= held.Token {
		t.Errorf("waiter's token %d, want > %d", r.lease.Token, held.Token)
	}
	select {
	case <-held.Done():
		if !errors.Is(held.Err(), lock.ErrExpired) && !errors.Is(held.Err(), lock.ErrNotHeld) {
			t.Errorf("paused holder's Err = %v, want ErrExpired or ErrNotHeld", held.Err())
		}
	default:
		t.Error("the paused holder's Done is still open although the lock passed on")
	}

	resume()
	ctx := bg(t, 30*time.Second)
	wantErr(t, "Renew by the resumed holder", holder.Renew(ctx, rebuild(held), 0), lock.ErrNotHeld)
	wantErr(t, "Release by the resumed holder", holder.Release(ctx, rebuild(held)), lock.ErrNotHeld)
	info, err := holder.Inspect(ctx, key)
	if err != nil || info.Token != r.lease.Token {
		t.Fatalf("Inspect after the holder resumed: %+v, %v; want the waiter's token %d", info, err, r.lease.Token)
	}
	if err := other.Release(ctx, r.lease); err != nil {
		t.Fatal(err)
	}
	// The resumed Locker works again: its session is replaced.
	again, err := holder.Acquire(ctx, key, lock.AcquireOptions{TTL: etcdTTL, AutoRenew: true})
	if err != nil {
		t.Fatalf("Acquire by the resumed holder: %v", err)
	}
	if err := holder.Release(ctx, again); err != nil {
		t.Fatal(err)
	}
}

// TestWaiterLeaseLost: a waiter whose own keep-alives stop loses its key
// while it waits (etcd issue 11456: such a waiter was granted the lock
// after its session had expired). It must not be granted on the dead key:
// it queues again with a fresh lease and is granted on that one.
func TestWaiterLeaseLost(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b := newLocker(t, e, nil), newLocker(t, e, nil)
	const key = "lost-waiter"
	ctx := bg(t, time.Minute)
	held, err := a.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	resume := b.suspendKeepAlives()
	waiter := acquireAsync(ctx, b, key, lock.AcquireOptions{TTL: etcdTTL})
	awaitWaiters(t, a, key, 1)
	// The waiter's lease runs out: its key goes. The holder releases
	// while the waiter's keep-alives are still held back, so that only the
	// re-check after the watch fires can tell the waiter its key is gone.
	awaitWaiters(t, a, key, 0)
	defer resume()
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		info, err := a.Inspect(ctx, key)
		if err != nil || info.Token != r.lease.Token {
			t.Fatalf("waiter granted token %d, but Inspect says %+v, %v: granted on a key that is gone", r.lease.Token, info, err)
		}
		if err := b.Release(ctx, r.lease); err != nil {
			t.Fatalf("Release of the waiter's grant: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter never granted after its lease was lost and the holder released")
	}
}

// leader returns the index of e's current leader.
func leader(t *testing.T, e *testenv.Etcd) int {
	t.Helper()
	c := rawClient(t, e.Endpoints...)
	for i, ep := range e.Endpoints {
		st, err := c.Status(bg(t, 5*time.Second), ep)
		if err == nil && st.Leader == st.Header.MemberId {
			return i
		}
	}
	t.Fatal("no etcd member says it is the leader")
	return -1
}

// TestLeaderStopped: the etcd leader is stopped while a lock is held and a
// waiter is queued. The lock stays held (its lease survives the election,
// and its renewals go on against the new leader), and the waiter, whose
// watch may have been on the stopped member, is granted when the holder
// releases.
func TestLeaderStopped(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 3)
	a, b := newLocker(t, e, nil), newLocker(t, e, nil)
	const key = "leader-stopped"
	ctx := bg(t, time.Minute)
	held, err := a.Acquire(ctx, key, lock.AcquireOptions{TTL: etcdTTL, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	other, err := a.Acquire(ctx, key+".own-lease", lock.AcquireOptions{TTL: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	waiter := acquireAsync(ctx, b, key, lock.AcquireOptions{TTL: time.Minute})
	awaitWaiters(t, b, key, 1)

	i := leader(t, e)
	e.Members[i].Stop()
	t.Logf("stopped the leader, member %d", i)

	// Across the election and for a few TTLs after it, the auto-renewed
	// lease stays held and the waiter waits.
	select {
	case r := <-waiter:
		t.Fatalf("waiter granted while the holder held: %+v", r)
	case <-held.Done():
		t.Fatalf("held lease ended after the leader stopped: %v", held.Err())
	case <-time.After(3 * etcdTTL):
	}
	for _, lease := range []*lock.Lease{held, other} {
		info, err := b.Inspect(ctx, lease.Key)
		if err != nil || info.Token != lease.Token {
			t.Fatalf("Inspect(%q) after the election: %+v, %v; want token %d", lease.Key, info, err, lease.Token)
		}
	}
	if err := a.Renew(ctx, other, 0); err != nil {
		t.Fatalf("Renew of the own-lease grant after the election: %v", err)
	}

	if err := a.Release(ctx, held); err != nil {
		t.Fatalf("Release after the election: %v", err)
	}
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		if r.lease.Token <= held.Token {
			t.Errorf("waiter's token %d, want > %d", r.lease.Token, held.Token)
		}
		if err := b.Release(ctx, r.lease); err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("waiter not granted within 10 s of the release on the new leader")
	}
	if err := a.Release(ctx, other); err != nil {
		t.Fatal(err)
	}
}

// TestCancelledWaiterMidQueue: a waiter in the middle of the queue gives
// up; its key is removed at once (not left for its lease to expire), and
// the one behind it, which was watching it, moves up and is granted as
// soon as its new predecessor releases.
func TestCancelledWaiterMidQueue(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	ls := make([]*Locker, 4)
	for i := range ls {
		ls[i] = newLocker(t, e, nil)
	}
	const key = "mid-queue"
	ctx := bg(t, time.Minute)
	held, err := ls[0].Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	first := acquireAsync(ctx, ls[1], key, lock.AcquireOptions{TTL: time.Minute})
	awaitWaiters(t, ls[0], key, 1)
	mctx, cancel := context.WithCancel(ctx)
	middle := acquireAsync(mctx, ls[2], key, lock.AcquireOptions{TTL: time.Minute})
	awaitWaiters(t, ls[0], key, 2)
	last := acquireAsync(ctx, ls[3], key, lock.AcquireOptions{TTL: time.Minute})
	awaitWaiters(t, ls[0], key, 3)

	cancel()
	r := <-middle
	if r.lease != nil || !errors.Is(r.err, context.Canceled) {
		t.Fatalf("cancelled waiter: lease %v, err %v; want context.Canceled", r.lease, r.err)
	}
	// Its key is gone when Acquire returns (its TTL is a minute).
	resp, err := ls[0].Client().Get(ctx, ls[0].dir(key), clientWithPrefix()...)
	if err != nil {
		t.Fatal(err)
	}
	if resp.Count != 3 {
		t.Fatalf("%d contender keys after the middle waiter gave up, want 3 (holder and two waiters)", resp.Count)
	}

	if err := ls[0].Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	r = <-first
	if r.err != nil {
		t.Fatalf("first waiter: %v", r.err)
	}
	released := time.Now()
	if err := ls[1].Release(ctx, r.lease); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-last:
		if r.err != nil {
			t.Fatalf("last waiter: %v", r.err)
		}
		t.Logf("last waiter granted %v after its new predecessor released", time.Since(released))
		ls[3].Release(ctx, r.lease)
	case <-time.After(5 * time.Second):
		t.Fatal("the waiter behind the cancelled one was not granted within 5 s of the release")
	}
}
