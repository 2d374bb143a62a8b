package lock_test

import (
	"errors"
	"testing"
	"time"
	"unsafe"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func TestLeaseEndsAtDeadline(t *testing.T) {
	l := kit.NewLease(kit.Grant{Key: "k", Token: 1, TTL: 50 * time.Millisecond, Sent: time.Now()})
	select {
	case <-l.Done():
		t.Fatal("Done closed before the deadline")
	default:
	}
	<-l.Done()
	if now := time.Now(); now.Before(l.Deadline()) {
		t.Errorf("Done closed at %v, before the deadline %v", now, l.Deadline())
	}
	if !errors.Is(l.Err(), lock.ErrExpired) {
		t.Errorf("Err = %v, want ErrExpired", l.Err())
	}
	if kit.Extend(l, time.Now(), time.Minute) {
		t.Error("Extend revived an ended lease")
	}
}

func TestLeaseAlreadyPastDeadline(t *testing.T) {
	l := kit.NewLease(kit.Grant{Key: "k", TTL: time.Second, Sent: time.Now().Add(-time.Hour)})
	select {
	case <-l.Done():
	default:
		t.Fatal("a lease granted past its deadline is not done")
	}
}

func TestLeaseExtend(t *testing.T) {
	l := kit.NewLease(kit.Grant{Key: "k", TTL: 100 * time.Millisecond, Sent: time.Now()})
	sent := time.Now()
	if !kit.Extend(l, sent, time.Hour) {
		t.Fatal("Extend of a live lease failed")
	}
	if got, want := l.Deadline(), kit.DeadlineFor(sent, time.Hour, 0); !got.Equal(want) {
		t.Errorf("Deadline after Extend = %v, want %v", got, want)
	}
	if l.TTL() != time.Hour {
		t.Errorf("TTL after Extend = %v", l.TTL())
	}
	// The old deadline's timer must not end the extended lease.
	time.Sleep(150 * time.Millisecond)
	if l.Err() != nil {
		t.Fatalf("extended lease ended: %v", l.Err())
	}
	// A shorter renewal moves the deadline earlier: the backend's expiry
	// moved there too.
	sent = time.Now()
	kit.Extend(l, sent, 50*time.Millisecond)
	if got, want := l.Deadline(), kit.DeadlineFor(sent, 50*time.Millisecond, 0); !got.Equal(want) {
		t.Errorf("Deadline after a shorter Extend = %v, want %v", got, want)
	}
	<-l.Done()
	if !errors.Is(l.Err(), lock.ErrExpired) {
		t.Errorf("Err = %v, want ErrExpired", l.Err())
	}
}

func TestLeaseEndFirstCauseWins(t *testing.T) {
	l := kit.NewLease(kit.Grant{Key: "k", TTL: time.Hour, Sent: time.Now()})
	l.End(lock.ErrReleased)
	l.End(lock.ErrNotHeld)
	<-l.Done()
	if !errors.Is(l.Err(), lock.ErrReleased) {
		t.Errorf("Err = %v, want the first cause ErrReleased", l.Err())
	}
}

func TestNewHandle(t *testing.T) {
	seen := map[string]bool{}
	for range 1000 {
		h := lock.NewHandle()
		if len(h) != 32 {
			t.Fatalf("handle %q is not 128 bits of hex", h)
		}
		if seen[h] {
			t.Fatalf("handle %q repeated", h)
		}
		seen[h] = true
	}
}

func TestErrorsMatch(t *testing.T) {
	var err error = &lock.NotLeaderError{LeaderID: "2", LeaderAddr: "127.0.0.1:50052"}
	if !errors.Is(err, lock.ErrNotLeader) || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("%v does not match ErrNotLeader and ErrUnavailable", err)
	}
	var nl *lock.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderAddr != "127.0.0.1:50052" {
		t.Errorf("errors.As(NotLeaderError) failed for %v", err)
	}
	err = &lock.HeldError{Key: "k", Owner: "alice", Token: 7}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("%v does not match ErrNotAcquired", err)
	}
}

func TestRenewedAndReleased(t *testing.T) {
	l := kit.NewLease(kit.Grant{Key: "k", TTL: 100 * time.Millisecond, Sent: time.Now()})
	sent := time.Now()
	if err := kit.Renewed(l, sent, time.Hour, true); err != nil || !l.Deadline().Equal(kit.DeadlineFor(sent, time.Hour, 0)) {
		t.Fatalf("Renewed(held) = %v, deadline %v", err, l.Deadline())
	}
	if err := kit.Released(l, true); err != nil || !errors.Is(l.Err(), lock.ErrReleased) {
		t.Fatalf("Released(held) = %v, Err %v", err, l.Err())
	}
	if _, err := kit.ValidateRenew(l, time.Second); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("ValidateRenew of a released lease = %v, want ErrNotHeld", err)
	}
	if err := kit.Renewed(l, time.Now(), time.Hour, true); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("Renewed on an ended lease = %v, want ErrNotHeld", err)
	}

	for _, refuse := range []func(*lock.Lease) error{
		func(l *lock.Lease) error { return kit.Renewed(l, time.Now(), time.Hour, false) },
		func(l *lock.Lease) error { return kit.Released(l, false) },
	} {
		l := kit.NewLease(kit.Grant{Key: "k", TTL: time.Hour, Sent: time.Now()})
		err := refuse(l)
		if !errors.Is(err, lock.ErrNotHeld) || !errors.Is(l.Err(), lock.ErrNotHeld) {
			t.Errorf("refusal: %v, lease Err %v; want both ErrNotHeld", err, l.Err())
		}
		select {
		case <-l.Done():
		default:
			t.Error("a refused lease's Done is open")
		}
	}
}

// TestAfterEnd: callbacks run once the lease ends, whichever way, and one
// registered after the end runs at once.
func TestAfterEnd(t *testing.T) {
	for _, end := range []struct {
		name string
		do   func(l *lock.Lease)
	}{
		{"released", func(l *lock.Lease) { kit.Released(l, true) }},
		{"expired", func(l *lock.Lease) {}}, // a 30 ms TTL runs out
		{"refused", func(l *lock.Lease) { kit.Renewed(l, time.Now(), time.Minute, false) }},
	} {
		t.Run(end.name, func(t *testing.T) {
			l := kit.NewLease(kit.Grant{Key: "k", Owner: "o", Token: 1, Handle: "h", TTL: 30 * time.Millisecond, Sent: time.Now()})
			ran := make(chan struct{}, 2)
			l.AfterEnd(func() { ran <- struct{}{} })
			l.AfterEnd(func() { ran <- struct{}{} })
			select {
			case <-ran:
				t.Fatal("a callback ran while the lease lived")
			default:
			}
			end.do(l)
			for range 2 {
				select {
				case <-ran:
				case <-time.After(10 * time.Second):
					t.Fatal("a callback did not run after the lease ended")
				}
			}
			late := make(chan struct{})
			l.AfterEnd(func() { close(late) })
			<-late
		})
	}
}

// TestAfterEndSynchronous: a release or refusal has run the callbacks when
// it returns (nothing is left to a goroutine), and a callback may use the
// lease without deadlocking.
func TestAfterEndSynchronous(t *testing.T) {
	for _, end := range []struct {
		name string
		do   func(l *lock.Lease)
	}{
		{"released", func(l *lock.Lease) { kit.Released(l, true) }},
		{"refused", func(l *lock.Lease) { kit.Renewed(l, time.Now(), time.Minute, false) }},
		{"extended into the past", func(l *lock.Lease) { kit.Extend(l, time.Now().Add(-time.Hour), time.Second) }},
	} {
		t.Run(end.name, func(t *testing.T) {
			l := kit.NewLease(kit.Grant{Key: "k", Token: 1, Handle: "h", TTL: time.Minute, Sent: time.Now()})
			var seen error
			l.AfterEnd(func() { seen = l.Err(); l.AfterEnd(func() {}) })
			end.do(l)
			if seen == nil {
				t.Fatal("the callback had not run when the lease's end returned")
			}
		})
	}
}

// TestLeaseWanted: Wanted closes once on kit.MarkWanted, AfterWanted runs once
// (at once when registered late), and an ended lease is never marked.
func TestLeaseWanted(t *testing.T) {
	l := kit.NewLease(kit.Grant{Key: "k", Token: 1, Handle: lock.NewHandle(), TTL: time.Minute, Sent: time.Now()})
	ch := l.Wanted()
	calls := 0
	l.AfterWanted(func() { calls++ })
	select {
	case <-ch:
		t.Fatal("Wanted closed before MarkWanted")
	default:
	}
	kit.MarkWanted(l)
	kit.MarkWanted(l)
	select {
	case <-ch:
	default:
		t.Fatal("Wanted not closed after MarkWanted")
	}
	late := 0
	l.AfterWanted(func() { late++ })
	if calls != 1 || late != 1 || !l.IsWanted() {
		t.Fatalf("callbacks ran %d and %d times (want 1 each), IsWanted %v", calls, late, l.IsWanted())
	}

	ended := kit.NewLease(kit.Grant{Key: "k", Token: 2, Handle: lock.NewHandle(), TTL: time.Minute, Sent: time.Now()})
	ran := false
	ended.AfterWanted(func() { ran = true })
	ended.End(lock.ErrReleased)
	kit.MarkWanted(ended)
	select {
	case <-ended.Wanted():
		t.Fatal("an ended lease was marked wanted")
	default:
	}
	if ran || ended.IsWanted() {
		t.Fatal("an ended lease ran its AfterWanted callback")
	}
}

// A session lease held by a gateway is what the leader keeps per lease: its
// fields beyond the exported ones live apart until needed, and its lock is
// not a field, so that it fits the 112-byte size class.
func TestLeaseFitsItsSizeClass(t *testing.T) {
	if got := unsafe.Sizeof(lock.Lease{}); got > 112 {
		t.Fatalf("a Lease is %d bytes, more than 112", got)
	}
}

// TestLeasesSharingLocks: leases share a fixed set of locks, so thousands
// of them certainly share some; a lease's end callback that ends another
// lease, a session lease that takes state of its own (Done, Wanted) and
// keeps its session, and the session's end of them all must not deadlock.
func TestLeasesSharingLocks(t *testing.T) {
	s := kit.NewSession(kit.SessionGrant{ID: "s", Owner: "o", TTL: time.Minute, Sent: time.Now()})
	const n = 5000
	ls := make([]*lock.Lease, n)
	for i := range ls {
		ls[i] = kit.NewLease(kit.Grant{Key: "k", Token: lock.Token(i + 1), Sent: time.Now(), Session: s})
	}
	for i, l := range ls {
		if i%2 == 0 {
			next := ls[i+1]
			l.AfterEnd(func() { next.End(lock.ErrReleased) }) // ends its neighbour, outside l's lock
		}
		if i%3 == 0 {
			_ = l.Done()
			_ = l.Wanted()
		}
		if l.Session() != s {
			t.Fatalf("lease %d: Session() is not its session", i)
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < n; i += 4 {
			ls[i].End(lock.ErrReleased)
		}
		s.End(nil)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("ending leases that share locks deadlocked")
	}
	for i, l := range ls {
		if l.Err() == nil || l.Session() != s || l.TTL() != time.Minute {
			t.Fatalf("lease %d: Err %v, Session %p, TTL %v after its session ended", i, l.Err(), l.Session(), l.TTL())
		}
		if i%3 == 0 {
			<-l.Done()
		}
	}
	if s.Leases() != 0 {
		t.Fatalf("%d leases left in the ended session", s.Leases())
	}
}
