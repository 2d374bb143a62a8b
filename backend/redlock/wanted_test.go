package redlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// wantedBound is how long a test waits for a Wanted that must close.
const wantedBound = 2 * time.Second

func awaitWanted(t *testing.T, lease *lock.Lease, why string) {
	t.Helper()
	select {
	case <-lease.Wanted():
	case <-time.After(wantedBound):
		t.Fatalf("lease %q (token %d) not told it was wanted within %v although %s", lease.Key, lease.Token, wantedBound, why)
	}
}

// awaitMarked waits until every node's meta of key has the wanted mark.
func awaitMarked(t *testing.T, rs []*testenv.Redis, key string) {
	t.Helper()
	meta := DefaultPrefix + ":meta:{" + key + "}"
	deadline := time.Now().Add(wantedBound)
	for _, r := range rs {
		for {
			v, err := raw(t, r).HGet(bg(t, time.Minute), meta, "wanted").Result()
			if err == nil && v == "1" {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("node %s: %q not marked wanted within %v (%q, %v)", r.Addr, key, wantedBound, v, err)
			}
			time.Sleep(2 * time.Millisecond)
		}
	}
}

func notWanted(t *testing.T, lease *lock.Lease, why string) {
	t.Helper()
	if lease.IsWanted() {
		t.Errorf("lease %q (token %d) told it was wanted although %s", lease.Key, lease.Token, why)
	}
}

// wantEntries is how many keys l keeps wanted-signal state for.
func wantEntries(l *Locker) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.want)
}

// acquireLater starts l.Acquire(key) and returns its outcome's channel.
func acquireLater(ctx context.Context, l *Locker, key string, opts lock.AcquireOptions) <-chan *lock.Lease {
	got := make(chan *lock.Lease, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, opts)
		if err != nil {
			lease = nil
		}
		got <- lease
	}()
	return got
}

// TestWantedLocalWaiter: a caller of the holder's own Locker queues in its
// gate and never reaches Redis, yet the holder is told at once — with every
// node paused, so no server round trip can be what told it. A local waiter
// that gives up leaves the lease wanted (it never reopens) and leaves no
// state behind; a lease granted with nobody waiting is not wanted.
func TestWantedLocalWaiter(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	l := newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}
	held, err := l.Acquire(bg(t, time.Minute), "local", opts)
	if err != nil {
		t.Fatal(err)
	}
	notWanted(t, held, "nobody waits yet")
	for _, r := range rs {
		r.Pause()
	}
	ctx, cancel := context.WithCancel(bg(t, time.Minute))
	gaveUp := acquireLater(ctx, l, "local", opts)
	awaitWanted(t, held, "a caller of the same Locker queued behind it (all nodes paused)")
	awaitQueued(t, l, "local", 1)
	cancel()
	if lease := <-gaveUp; lease != nil {
		t.Fatalf("the cancelled waiter got a lease")
	}
	for _, r := range rs {
		r.Resume()
	}
	if !held.IsWanted() {
		t.Errorf("Wanted reopened after the waiter gave up")
	}
	if err := l.Release(bg(t, time.Minute), held); err != nil {
		t.Fatal(err)
	}
	if n := wantEntries(l); n != 0 {
		t.Errorf("%d keys of wanted state left with nothing held and nobody waiting", n)
	}
	next, err := l.Acquire(bg(t, time.Minute), "local", opts)
	if err != nil {
		t.Fatal(err)
	}
	notWanted(t, next, "the only waiter gave up before it was granted")
	if err := l.Release(bg(t, time.Minute), next); err != nil {
		t.Fatal(err)
	}
}

// TestWantedAcrossHandoff: a waiter of another Locker waits behind a lease
// that this Locker hands to its own next caller (no release, so the remote
// waiter does not retry until the old TTL): the handed lease is told at
// once, the remote waiter still being there. After the real release the
// remote waiter is granted, and nobody is left to want its lease.
func TestWantedAcrossHandoff(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	a, b := newLocker(t, rs, nil), newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}
	first, err := a.Acquire(bg(t, time.Minute), "handed", opts)
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	remote := acquireLater(bg(t, time.Minute), b, "handed", opts)
	awaitWanted(t, first, "a caller of another Locker waits")
	t.Logf("holder told %v after the other Locker's Acquire started", time.Since(start))
	local := acquireLater(bg(t, time.Minute), a, "handed", opts)
	awaitQueued(t, a, "handed", 1)
	if err := a.Release(bg(t, time.Minute), first); err != nil {
		t.Fatal(err)
	}
	second := <-local
	if second == nil {
		t.Fatal("the local caller got no lease")
	}
	if second.Token <= first.Token {
		t.Fatalf("token %d after %d: not a handoff?", second.Token, first.Token)
	}
	awaitWanted(t, second, "the other Locker's caller still waits (it was handed over, not released)")
	if err := a.Release(bg(t, time.Minute), second); err != nil {
		t.Fatal(err)
	}
	var last *lock.Lease
	select {
	case last = <-remote:
	case <-time.After(wantedBound):
		t.Fatal("the remote waiter was not granted after the release")
	}
	if last == nil {
		t.Fatal("the remote waiter failed")
	}
	notWanted(t, last, "nobody else waits")
	if err := b.Release(bg(t, time.Minute), last); err != nil {
		t.Fatal(err)
	}
	if na, nb := wantEntries(a), wantEntries(b); na+nb != 0 {
		t.Errorf("wanted state left behind: %d keys in a, %d in b", na, nb)
	}
}

// TestWantedRebuiltLease: a lease rebuilt with kit.NewLease and renewed by
// another Locker (as the gateway does) is told from that Renew on: by the
// renewal itself when a waiter was already refused by the grant, and by
// the pub/sub message when the waiter comes after it.
func TestWantedRebuiltLease(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	a, a2, b := newLocker(t, rs, nil), newLocker(t, rs, nil), newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}
	rebuild := func(l *lock.Lease) *lock.Lease {
		return kit.NewLease(kit.Grant{Key: l.Key, Owner: l.Owner, Token: l.Token, Handle: l.Handle,
			TTL: time.Minute, Sent: time.Now()})
	}
	ctx, cancel := context.WithCancel(bg(t, time.Minute))
	defer cancel()

	// The waiter comes after the rebuilt copy's first renewal: only the
	// message to a2's channel can tell the copy (it is not renewed again).
	after, err := a.Acquire(bg(t, time.Minute), "after", opts)
	if err != nil {
		t.Fatal(err)
	}
	copyAfter := rebuild(after)
	if err := a2.Renew(bg(t, time.Minute), copyAfter, time.Minute); err != nil {
		t.Fatal(err)
	}
	notWanted(t, copyAfter, "nobody waits yet")
	acquireLater(ctx, b, "after", opts)
	awaitWanted(t, copyAfter, "a caller waits and the copy's Locker renewed it last")

	// The waiter came before: the renewal reports it.
	before, err := a.Acquire(bg(t, time.Minute), "before", opts)
	if err != nil {
		t.Fatal(err)
	}
	acquireLater(ctx, b, "before", opts)
	awaitWanted(t, before, "a caller of another Locker waits")
	// The holder hears the first node's message; a renewal reads the mark
	// from the quorum it reaches first, so wait until the waiter's refused
	// attempt has marked every node (its round returns on a quorum too).
	awaitMarked(t, rs, "before")
	copyBefore := rebuild(before)
	if err := a2.Renew(bg(t, time.Minute), copyBefore, time.Minute); err != nil {
		t.Fatal(err)
	}
	if !copyBefore.IsWanted() {
		t.Errorf("rebuilt copy not wanted after a Renew that found a waiter had been refused")
	}

	cancel()
	for _, l := range []*lock.Lease{copyAfter, copyBefore} {
		if err := a2.Release(bg(t, time.Minute), l); err != nil {
			t.Errorf("Release %q: %v", l.Key, err)
		}
	}
	if n := wantEntries(a2); n != 0 {
		t.Errorf("%d keys of wanted state left in the renewing Locker", n)
	}
}

// TestWantedNotByTryAcquire: a TryAcquire that finds the key held does not
// wait, so it does not tell the holder. With one node, messages reach the
// holder in the order their scripts ran: a waiter on a sentinel key after
// the TryAcquire proves that the TryAcquire's would-be message has arrived.
// A waiter that gives up leaves the lease wanted, and the next grant, made
// with nobody waiting, is not.
func TestWantedNotByTryAcquire(t *testing.T) {
	rs := testenv.StartRedisN(t, 1)
	a, b := newLocker(t, rs, nil), newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}
	held, err := a.Acquire(bg(t, time.Minute), "try", opts)
	if err != nil {
		t.Fatal(err)
	}
	sentinel, err := a.Acquire(bg(t, time.Minute), "sentinel", opts)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.TryAcquire(bg(t, time.Minute), "try", opts); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v", err)
	}
	ctx, cancel := context.WithCancel(bg(t, time.Minute))
	waiter := acquireLater(ctx, b, "sentinel", opts)
	awaitWanted(t, sentinel, "a caller waits for it")
	notWanted(t, held, "only a TryAcquire found it held")

	gone, cancelGone := context.WithCancel(bg(t, time.Minute))
	quitter := acquireLater(gone, b, "try", opts)
	awaitWanted(t, held, "a caller waits for it")
	cancelGone()
	if l := <-quitter; l != nil {
		t.Fatal("the cancelled waiter got a lease")
	}
	cancel()
	<-waiter
	if err := a.Release(bg(t, time.Minute), held); err != nil {
		t.Fatal(err)
	}
	next, err := b.Acquire(bg(t, time.Minute), "try", opts)
	if err != nil {
		t.Fatal(err)
	}
	notWanted(t, next, "the waiter gave up before the release")
	for l, lease := range map[*Locker]*lock.Lease{a: sentinel, b: next} {
		if err := l.Release(bg(t, time.Minute), lease); err != nil {
			t.Error(err)
		}
	}
	if na, nb := wantEntries(a), wantEntries(b); na+nb != 0 {
		t.Errorf("wanted state left behind: %d keys in a, %d in b", na, nb)
	}
}

// TestWantedMessageBeforeGrant: a waiter refused by a grant can publish
// before the grant's reply reaches its Locker. While a request for the key
// is in flight the message is kept (the newest maxEarly handles) and tells
// the lease when it is tracked; otherwise, and once the request is over,
// nothing of it is kept.
func TestWantedMessageBeforeGrant(t *testing.T) {
	l := newLocker(t, testenv.StartRedisN(t, 1), nil)
	grant := func(handle string) *lock.Lease {
		return kit.NewLease(kit.Grant{Key: "early", Handle: handle, Token: 1, TTL: time.Minute, Sent: time.Now()})
	}
	l.wantedMessage("h0 early") // no request in flight: ignored
	if n := wantEntries(l); n != 0 {
		t.Fatalf("a message for a key with nothing in flight left %d keys of state", n)
	}
	done := l.expect("early")
	for i := range maxEarly + 2 {
		l.wantedMessage(fmt.Sprintf("h%d early", i))
	}
	oldest, newest := grant("h0"), grant(fmt.Sprint("h", maxEarly+1))
	l.track(oldest, false, false)
	l.track(newest, false, false)
	done()
	notWanted(t, oldest, "its message was pushed out by newer ones")
	if !newest.IsWanted() {
		t.Errorf("a message that came before the grant was tracked was lost")
	}
	for _, lease := range []*lock.Lease{oldest, newest} {
		lease.End(lock.ErrReleased)
	}
	if n := wantEntries(l); n != 0 {
		t.Errorf("%d keys of state left after the request and the leases ended", n)
	}
}

// TestLateRequestOfAReleasedGrant: a request of the round that won a grant
// can reach a node after the grant's release (the round returned with a
// quorum, the rest collected in the background). Run then, it must
// neither grant the key again on that node nor, finding the next holder,
// tell it that a caller waits (no caller does).
func TestLateRequestOfAReleasedGrant(t *testing.T) {
	rs := testenv.StartRedisN(t, 1)
	a, b := newLocker(t, rs, nil), newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}
	first, err := a.Acquire(bg(t, time.Minute), "late", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Release(bg(t, time.Minute), first); err != nil {
		t.Fatal(err)
	}
	k := a.keysFor("late")
	late := func() grantReply {
		t.Helper()
		r, err := decodeAcquire(acquireScript.Run(bg(t, time.Minute), raw(t, rs[0]),
			[]string{k.lock, k.fence, k.meta, a.abortKey("late", "straggler"), a.releasedKey("late", first.Handle)},
			first.Handle, opts.TTL.Milliseconds(), "", "", uint64(first.Token), a.wantChannel, "1", "late").Slice())
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	// On a free key: no grant of the released handle.
	if r := late(); r.Granted {
		t.Fatalf("a late request of a released grant took the key again: %+v", r)
	}
	next, err := b.Acquire(bg(t, time.Minute), "late", opts)
	if err != nil {
		t.Fatal(err)
	}
	// Beside the next holder: no wanted signal.
	late()
	if v, _ := raw(t, rs[0]).HGet(bg(t, time.Minute), k.meta, "wanted").Result(); v == "1" {
		t.Fatal("a late request of a released grant marked the next holder wanted")
	}
	notWanted(t, next, "no caller waits for it")
	if err := b.Release(bg(t, time.Minute), next); err != nil {
		t.Fatal(err)
	}
}
