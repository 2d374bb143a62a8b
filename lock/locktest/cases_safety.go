package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// mutualExclusion: many goroutines on several clients take turns on one key.
// Inside the lock each one increments a shared counter with a separate load
// and store (a shared-counter check: any overlap loses updates, so the counter
// falls short of the number of grants), and every hold is recorded for the
// history checker. The load and store are atomic only so that the race
// detector does not stop the run when a broken locker overlaps; the
// increment as a whole is not.
func (s *suite) mutualExclusion(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	lockers := make([]lock.Locker, 4)
	for i := range lockers {
		lockers[i] = s.locker(t)
	}
	var counter, grants atomic.Int64
	var rec Recorder
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	errs := make(chan error, caps.MutexGoroutines*caps.MutexCycles)
	var stalled atomic.Bool
	// A backend that stops granting (waiters never woken) must fail the
	// case, not hang it: give up when no grant happened for 3×GrantBound.
	go func() {
		tick := time.NewTicker(caps.GrantBound)
		defer tick.Stop()
		last, idle := int64(-1), 0
		for {
			select {
			case <-c.Done():
				return
			case <-tick.C:
			}
			if n := grants.Load(); n != last {
				last, idle = n, 0
				continue
			}
			if idle++; idle == 3 {
				t.Errorf("no grant for %v after %d grants: waiters are not being served", 3*caps.GrantBound, last)
				stalled.Store(true)
				cancel()
				return
			}
		}
	}()
	var wg sync.WaitGroup
	for g := range caps.MutexGoroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := lockers[g%len(lockers)]
			owner := fmt.Sprintf("owner-%d", g)
			for i := range caps.MutexCycles {
				lease, err := l.Acquire(c, key, lock.AcquireOptions{TTL: longTTL, Owner: owner})
				if err != nil {
					errs <- fmt.Errorf("%s cycle %d: Acquire: %w", owner, i, err)
					return
				}
				start := time.Now()
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				grants.Add(1)
				end := time.Now()
				if d := lease.Deadline(); d.Before(end) {
					end = d
				}
				rec.Add(Hold{Key: key, Holder: owner, Token: lease.Token, Start: start, End: end})
				// A failed release is reported but does not stop the run:
				// the counter and the history show what it means.
				if err := l.Release(c, lease); err != nil {
					errs <- fmt.Errorf("%s cycle %d: Release(token %d): %w", owner, i, lease.Token, err)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	close(errs)
	reported := 0
	for err := range errs {
		if stalled.Load() && errors.Is(err, context.Canceled) {
			continue // a consequence of the stall reported above
		}
		if reported++; reported <= 5 {
			t.Error(err)
		}
	}
	if reported > 5 {
		t.Errorf("... and %d more errors", reported-5)
	}
	if want := int64(caps.MutexGoroutines * caps.MutexCycles); grants.Load() != want {
		t.Errorf("%d grants, want %d", grants.Load(), want)
	}
	if counter.Load() != grants.Load() {
		t.Errorf("mutual exclusion violated: counter is %d after %d grants (%d updates lost to overlapping holders)",
			counter.Load(), grants.Load(), grants.Load()-counter.Load())
	}
	vs := CheckHistory(rec.Holds())
	for i, v := range vs {
		if i == 10 {
			t.Errorf("history: ... and %d more violations", len(vs)-i)
			break
		}
		t.Errorf("history: %v", v)
	}
}

// crashedHolderExpires: a holder that neither renews nor releases loses the
// lock at its TTL; the next acquirer gets it within TTL + slack, and never
// before the crashed holder's own deadline.
func (s *suite) crashedHolderExpires(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	a, b := s.locker(t), s.locker(t)
	crashed := mustAcquire(t, a, key, lock.AcquireOptions{TTL: caps.TTL, Owner: "crashed"}, time.Minute)
	// The holder "crashes": nothing renews or releases crashed from here on.
	next, err := b.Acquire(ctx(t, caps.TTL+caps.ExpirySlack), key, lock.AcquireOptions{TTL: longTTL, Owner: "next"})
	granted := time.Now()
	if err != nil {
		t.Fatalf("next acquirer not granted within TTL %v + slack %v of the crashed holder's grant: %v", caps.TTL, caps.ExpirySlack, err)
	}
	if granted.Before(crashed.Deadline()) {
		t.Errorf("next acquirer granted at %v, before the crashed holder's deadline %v: both believed they held %q",
			granted.Format(time.StampMicro), crashed.Deadline().Format(time.StampMicro), key)
	}
	if next.Token <= crashed.Token {
		t.Errorf("token after expiry %d, want > %d", next.Token, crashed.Token)
	}
	select {
	case <-crashed.Done():
		wantErr(t, "crashed lease Err", crashed.Err(), lock.ErrExpired)
	case <-time.After(caps.GrantBound):
		t.Errorf("crashed holder's Done did not close after its deadline %v", crashed.Deadline())
	}
	mustRelease(t, b, next)
}

// staleRelease: a release (or renewal) of a lease whose key was re-granted
// returns ErrNotHeld and leaves the new holder holding (the classic fencing
// hazard: a paused holder whose lease expired acts on it anyway). Rebuilt
// leases, whose local deadline has not passed, make sure it is the backend
// that refuses, not only the client.
func (s *suite) staleRelease(t *testing.T) {
	caps := s.f.Caps
	a, b, c := s.locker(t), s.locker(t), s.locker(t)

	t.Run("AfterExpiry", func(t *testing.T) {
		key := key(t, "k")
		old := mustAcquire(t, a, key, lock.AcquireOptions{TTL: caps.TTL, Owner: "old"}, time.Minute)
		cur := mustAcquire(t, b, key, lock.AcquireOptions{TTL: longTTL, Owner: "new"}, caps.TTL+caps.ExpirySlack)
		wantErr(t, "Release of the expired lease", a.Release(ctx(t, time.Minute), old), lock.ErrNotHeld)
		wantErr(t, "Release of the rebuilt expired lease", a.Release(ctx(t, time.Minute), rebuild(old)), lock.ErrNotHeld)
		wantErr(t, "Renew of the rebuilt expired lease", a.Renew(ctx(t, time.Minute), rebuild(old), longTTL), lock.ErrNotHeld)
		s.stillHeld(t, c, cur)
		mustRelease(t, b, cur)
	})
	t.Run("AfterRelease", func(t *testing.T) {
		key := key(t, "k")
		old := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "old"}, time.Minute)
		saved := rebuild(old)
		mustRelease(t, a, old)
		cur := mustAcquire(t, b, key, lock.AcquireOptions{TTL: longTTL, Owner: "new"}, time.Minute)
		wantErr(t, "second Release of a released lease", a.Release(ctx(t, time.Minute), old), lock.ErrNotHeld)
		wantErr(t, "Release of a copy of the released lease", a.Release(ctx(t, time.Minute), saved), lock.ErrNotHeld)
		s.stillHeld(t, c, cur)
		mustRelease(t, b, cur)
	})
}

// stillHeld checks that lease still holds its key: Inspect names its token,
// a TryAcquire by someone else fails, and its Done is open.
func (s *suite) stillHeld(t *testing.T, other lock.Locker, lease *lock.Lease) {
	t.Helper()
	if got := holderToken(t, other, lease.Key); got != lease.Token {
		t.Errorf("Inspect(%q) reports token %d, want the current holder's %d", lease.Key, got, lease.Token)
	}
	if l, err := other.TryAcquire(ctx(t, time.Minute), lease.Key, lock.AcquireOptions{TTL: longTTL, Owner: "intruder"}); err == nil {
		t.Errorf("TryAcquire(%q) granted token %d while token %d holds it", lease.Key, l.Token, lease.Token)
	}
	select {
	case <-lease.Done():
		t.Errorf("the holder's Done closed: %v", lease.Err())
	default:
	}
}

// fencingTokens: tokens strictly increase across successive grants of a key
// (release handoffs and expiry takeovers alike), and keys are independent.
func (s *suite) fencingTokens(t *testing.T) {
	caps := s.f.Caps
	k1, k2 := key(t, "k1"), key(t, "k2")
	ls := []lock.Locker{s.locker(t), s.locker(t)}
	last := map[string]lock.Token{}
	grant := func(l lock.Locker, key string, opts lock.AcquireOptions, wait time.Duration) *lock.Lease {
		t.Helper()
		lease := mustAcquire(t, l, key, opts, wait)
		if lease.Token <= last[key] {
			t.Errorf("grant of %q: token %d after %d, want strictly increasing", key, lease.Token, last[key])
		}
		last[key] = lease.Token
		return lease
	}
	for i := range 10 {
		key := []string{k1, k2}[i%2]
		l := ls[i%len(ls)]
		mustRelease(t, l, grant(l, key, lock.AcquireOptions{TTL: longTTL}, time.Minute))
	}
	// A takeover after expiry must not reuse or lower the token.
	grant(ls[0], k1, lock.AcquireOptions{TTL: caps.TTL}, time.Minute)
	mustRelease(t, ls[1], grant(ls[1], k1, lock.AcquireOptions{TTL: longTTL}, caps.TTL+caps.ExpirySlack))

	// Keys are independent: holding k1 does not hold k2.
	h1 := grant(ls[0], k1, lock.AcquireOptions{TTL: longTTL}, time.Minute)
	h2, err := ls[1].TryAcquire(ctx(t, time.Minute), k2, lock.AcquireOptions{TTL: longTTL})
	if err != nil {
		t.Fatalf("TryAcquire(%q) while only %q is held: %v", k2, k1, err)
	}
	mustRelease(t, ls[1], h2)
	mustRelease(t, ls[0], h1)
}
