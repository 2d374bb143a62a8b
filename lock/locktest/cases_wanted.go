package locktest

import (
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// wanted: where the backend claims the wanted signal, a holder hears that a
// caller waits for its key (Lease.Wanted closes within GrantBound), a lease
// whose key nobody waits for never hears it, and a lease handed to a waiter
// while another still waits is wanted from the start (the backend tells the
// new holder too, not only the one that was holding when the waiter came).
func (s *suite) wanted(t *testing.T) {
	caps := s.f.Caps
	if !caps.Wanted {
		t.Skip("backend does not claim the wanted signal")
	}
	k, other := key(t, "k"), key(t, "other")
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	held := mustAcquire(t, a, k, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
	quiet := mustAcquire(t, a, other, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
	notWanted(t, held, "before anyone waited")

	first := acquireAsync(ctx(t, time.Minute), b, k, lock.AcquireOptions{TTL: longTTL, Owner: "waiter-1"})
	s.awaitWaiters(t, a, k, 1)
	queued := time.Now()
	awaitWanted(t, held, caps.GrantBound, "a caller queued for its key")
	t.Logf("holder heard it was wanted %v after the waiter was seen queued", time.Since(queued))
	second := acquireAsync(ctx(t, time.Minute), c, k, lock.AcquireOptions{TTL: longTTL, Owner: "waiter-2"})
	s.awaitWaiters(t, a, k, 2)
	notWanted(t, quiet, "nobody waits for its key")

	mustRelease(t, a, held)
	// Whichever waiter is granted first (FIFO or not), the other still waits.
	var next *lock.Lease
	var nextL lock.Locker
	var rest <-chan result
	var restL lock.Locker
	select {
	case r := <-first:
		next, nextL, rest, restL = r.lease, b, second, c
		if r.err != nil {
			t.Fatalf("first waiter: %v", r.err)
		}
	case r := <-second:
		next, nextL, rest, restL = r.lease, c, first, b
		if r.err != nil {
			t.Fatalf("second waiter: %v", r.err)
		}
	case <-time.After(caps.GrantBound):
		t.Fatalf("no waiter granted within %v of the release", caps.GrantBound)
	}
	awaitWanted(t, next, caps.GrantBound, "it was granted while another caller still waited")
	mustRelease(t, nextL, next)
	var last *lock.Lease
	select {
	case r := <-rest:
		if r.err != nil {
			t.Fatalf("last waiter: %v", r.err)
		}
		last = r.lease
	case <-time.After(caps.GrantBound):
		t.Fatalf("last waiter not granted within %v of the release", caps.GrantBound)
	}
	notWanted(t, last, "it was granted with nobody else waiting")
	mustRelease(t, restL, last)
	notWanted(t, quiet, "nobody waited for its key")
	mustRelease(t, a, quiet)
}

// awaitWanted fails the test unless lease's Wanted closes within d.
func awaitWanted(t *testing.T, lease *lock.Lease, d time.Duration, why string) {
	t.Helper()
	select {
	case <-lease.Wanted():
	case <-time.After(d):
		t.Fatalf("lease %q (token %d) not told it was wanted within %v although %s", lease.Key, lease.Token, d, why)
	}
}

// notWanted fails the test if lease has been told it is wanted.
func notWanted(t *testing.T, lease *lock.Lease, why string) {
	t.Helper()
	select {
	case <-lease.Wanted():
		t.Errorf("lease %q (token %d) told it was wanted although %s", lease.Key, lease.Token, why)
	default:
	}
}
