package sqllock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// wantedBound is how long a test waits for a signal that comes within a
// round trip or two.
const wantedBound = 10 * time.Second

type acquired struct {
	lease *lock.Lease
	err   error
}

func acquireAsync(ctx context.Context, l *Locker, key, owner string) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: owner})
		ch <- acquired{lease, err}
	}()
	return ch
}

func granted(t *testing.T, ch <-chan acquired, who string) *lock.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", who, r.err)
		}
		return r.lease
	case <-time.After(wantedBound):
		t.Fatalf("%s not granted within %v", who, wantedBound)
	}
	return nil
}

func awaitWanted(t *testing.T, lease *lock.Lease, why string) {
	t.Helper()
	select {
	case <-lease.Wanted():
	case <-time.After(wantedBound):
		t.Fatalf("lease %q token %d not told it is wanted within %v although %s", lease.Key, lease.Token, wantedBound, why)
	}
}

func mustAcquire(t *testing.T, l *Locker, key, owner string) *lock.Lease {
	t.Helper()
	lease, err := l.Acquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: time.Minute, Owner: owner})
	if err != nil {
		t.Fatalf("Acquire(%q) by %s: %v", key, owner, err)
	}
	return lease
}

func mustRelease(t *testing.T, l *Locker, lease *lock.Lease) {
	t.Helper()
	if err := l.Release(bg(t, time.Minute), lease); err != nil {
		t.Fatalf("Release(%q, token %d): %v", lease.Key, lease.Token, err)
	}
}

// TestWantedLocalWaiters: callers of the holder's own Locker queue in the
// local gate; the holder is told at once, with no statement sent, and a
// lease handed over while another local caller waits is told as it is
// granted, while the last one is not.
func TestWantedLocalWaiters(t *testing.T) {
	t.Parallel()
	l := newLocker(t, shared(t), nil)
	key := "wanted-local"
	held := mustAcquire(t, l, key, "holder")
	attempts := l.stats.attempts.Load()
	first := acquireAsync(bg(t, time.Minute), l, key, "w1")
	awaitWanted(t, held, "a caller of its Locker queued for its key")
	second := acquireAsync(bg(t, time.Minute), l, key, "w2")
	eventually(t, wantedBound, "two callers queued in the gate", func() bool { return l.gate.Queued(key) == 2 })

	mustRelease(t, l, held)
	next := granted(t, first, "first local waiter")
	if !next.IsWanted() {
		t.Errorf("lease handed to the first local waiter while the second waited: not wanted")
	}
	mustRelease(t, l, next)
	last := granted(t, second, "second local waiter")
	if last.IsWanted() {
		t.Errorf("lease handed to the last local waiter, nobody waiting: wanted")
	}
	mustRelease(t, l, last)
	if n := l.stats.attempts.Load() - attempts; n != 0 {
		t.Errorf("%d acquire statements sent; local waiters and handoffs should need none", n)
	}
}

// TestWantedAcrossLockers: a waiter of another Locker tells the holder
// through the row mark and its notification, sent once per grant however
// many Lockers wait; a local handoff reads the mark back, so the new holder
// is told too; a waiter that gives up leaves its holder wanted (Wanted
// never reopens), and the next grant of the key after a real release
// starts unwanted.
func TestWantedAcrossLockers(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a, b, c := newLocker(t, p, nil), newLocker(t, p, nil), newLocker(t, p, nil)
	key := "wanted-across"
	listener := admin(t, p)
	if _, err := listener.Exec(bg(t, time.Minute), "LISTEN "+pgx.Identifier{a.names.channel}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	held := mustAcquire(t, a, key, "holder")
	ctxB, giveUpB := context.WithCancel(bg(t, time.Minute))
	waiterB := acquireAsync(ctxB, b, key, "b")
	awaitWanted(t, held, "a caller of another Locker waits")
	waiterC := acquireAsync(bg(t, time.Minute), c, key, "c")
	eventually(t, wantedBound, "both remote waiters made an attempt", func() bool {
		return b.stats.held.Load() > 0 && c.stats.held.Load() > 0
	})
	local := acquireAsync(bg(t, time.Minute), a, key, "local")
	eventually(t, wantedBound, "local caller queued", func() bool { return a.gate.Queued(key) == 1 })

	// The release hands the key to the local caller in one UPDATE, which
	// keeps the other Lockers' mark and reads it back.
	mustRelease(t, a, held)
	next := granted(t, local, "local waiter")
	if !next.IsWanted() {
		t.Errorf("lease handed over while other Lockers' callers waited: not wanted")
	}
	giveUpB()
	if r := <-waiterB; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("waiter that gave up: %v, %v; want context.Canceled", r.lease, r.err)
	}
	if !next.IsWanted() {
		t.Errorf("Wanted reopened when a waiter gave up")
	}
	mustRelease(t, a, next)
	fromC := granted(t, waiterC, "c")
	if fromC.IsWanted() {
		t.Errorf("fresh grant after a real release with nobody waiting: wanted")
	}
	mustRelease(t, c, fromC)

	// One wanted notice per grant: held's (token, key) came once, however
	// many Lockers marked the row. Notifications arrive in commit order,
	// and every mark of held's row committed before its handoff.
	notices := map[string]int{}
	ctx := bg(t, time.Minute)
	for {
		n, err := listener.WaitForNotification(ctx)
		if err != nil {
			t.Fatalf("waiting for the release notification: %v", err)
		}
		if n.Payload == key {
			break // fromC's release: every notice before it has arrived
		}
		notices[n.Payload]++
	}
	if got := notices[fmt.Sprintf("%d\t%s", held.Token, key)]; got != 1 {
		t.Errorf("%d wanted notices for the first grant, want exactly 1 (all: %v)", got, notices)
	}
}

// TestWantedRebuiltLease: a lease rebuilt from (Key, Token, Handle) and
// renewed through another Locker is told too: by notification once that
// Locker knows it, and at once by the renewal itself when the row is
// already marked. A Locker keeps one rebuilt copy per grant, the latest.
func TestWantedRebuiltLease(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a, b, c := newLocker(t, p, nil), newLocker(t, p, nil), newLocker(t, p, nil)
	key := "wanted-rebuilt"
	held := mustAcquire(t, a, key, "holder")
	rebuild := func() *lock.Lease {
		return kit.NewLease(kit.Grant{Key: key, Token: held.Token, Handle: held.Handle, TTL: time.Minute, Sent: time.Now()})
	}
	copy1 := rebuild()
	if err := b.Renew(bg(t, time.Minute), copy1, time.Minute); err != nil {
		t.Fatalf("Renew of a rebuilt lease: %v", err)
	}
	if copy1.IsWanted() {
		t.Errorf("rebuilt lease wanted before anyone waited")
	}
	waiter := acquireAsync(bg(t, time.Minute), c, key, "waiter")
	awaitWanted(t, held, "a caller waits")
	awaitWanted(t, copy1, "a caller waits, and its Locker renewed it")

	copy2 := rebuild()
	if err := b.Renew(bg(t, time.Minute), copy2, time.Minute); err != nil {
		t.Fatalf("Renew of a second rebuilt lease: %v", err)
	}
	if !copy2.IsWanted() {
		t.Errorf("rebuilt lease renewed while a caller waits: not wanted after the Renew")
	}
	b.wanted.mu.Lock()
	n := len(b.wanted.held[key])
	b.wanted.mu.Unlock()
	if n != 1 {
		t.Errorf("Locker tracks %d copies of one rebuilt grant, want 1 (the latest)", n)
	}
	// The gateway releases with a rebuilt copy too: the Locker forgets it
	// as it ends. (A copy nobody releases is forgotten at its deadline.)
	mustRelease(t, b, copy2)
	b.wanted.mu.Lock()
	n = len(b.wanted.held)
	b.wanted.mu.Unlock()
	if n != 0 {
		t.Errorf("Locker still tracks %d keys after releasing the only lease it knew", n)
	}
	mustRelease(t, c, granted(t, waiter, "waiter"))
}

// TestWantedTryAcquire: a TryAcquire that finds the key held does not wait,
// so it neither marks the row nor tells the holder.
func TestWantedTryAcquire(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a, b := newLocker(t, p, nil), newLocker(t, p, nil)
	key, barrier := "wanted-try", "wanted-try-barrier"
	held := mustAcquire(t, a, key, "holder")
	fence := mustAcquire(t, a, barrier, "holder")
	if _, err := b.TryAcquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: %v, want ErrNotAcquired", err)
	}
	// A notice sent after the TryAcquire returned arrives after anything
	// the TryAcquire could have caused.
	adm := admin(t, p)
	if _, err := adm.Exec(bg(t, time.Minute), "SELECT pg_notify($1, $2)", a.names.channel, fmt.Sprintf("%d\t%s", fence.Token, barrier)); err != nil {
		t.Fatal(err)
	}
	awaitWanted(t, fence, "the test sent its notice")
	if held.IsWanted() {
		t.Errorf("holder told it is wanted after a TryAcquire")
	}
	var contended bool
	if err := adm.QueryRow(bg(t, time.Minute), "SELECT contended FROM "+a.names.table+" WHERE key = $1", key).Scan(&contended); err != nil || contended {
		t.Errorf("row after a TryAcquire: contended %v (%v), want false", contended, err)
	}
	mustRelease(t, a, held)
	mustRelease(t, a, fence)
}

// TestWantedAfterListenerLost: a mark made while the holder's listening
// connection was down (its notice lost; here a mark made without one) is
// read once the connection is replaced.
func TestWantedAfterListenerLost(t *testing.T) {
	t.Parallel()
	p := shared(t)
	table := "wanted_relisten"
	a := newLocker(t, p, func(c *Config) { c.Table = table })
	key := "wanted-relisten"
	held := mustAcquire(t, a, key, "holder")
	adm := admin(t, p)
	if _, err := adm.Exec(bg(t, time.Minute), "UPDATE "+a.names.table+" SET contended = true WHERE key = $1", key); err != nil {
		t.Fatal(err)
	}
	if held.IsWanted() {
		t.Fatalf("wanted before any notice or recheck")
	}
	var ok bool
	if err := adm.QueryRow(bg(t, time.Minute), `SELECT pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE query = $1`, "LISTEN "+pgx.Identifier{a.names.channel}.Sanitize()).Scan(&ok); err != nil || !ok {
		t.Fatalf("terminating the listening connection: %v %v", ok, err)
	}
	awaitWanted(t, held, "its row was marked while the listening connection was down")
	if a.stats.reconnects.Load() == 0 {
		t.Errorf("told without the listening connection being replaced")
	}
	mustRelease(t, a, held)
}
