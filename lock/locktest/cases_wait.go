package locktest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

type result struct {
	lease *lock.Lease
	err   error
}

// acquireAsync starts Acquire in a goroutine and returns its result channel.
func acquireAsync(c context.Context, l lock.Locker, key string, opts lock.AcquireOptions) <-chan result {
	ch := make(chan result, 1)
	go func() {
		lease, err := l.Acquire(c, key, opts)
		ch <- result{lease, err}
	}()
	return ch
}

// blockedAcquire: a blocked Acquire is granted after the holder releases,
// within GrantBound.
func (s *suite) blockedAcquire(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	a, b := s.locker(t), s.locker(t)
	held := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
	waiter := acquireAsync(ctx(t, time.Minute), b, key, lock.AcquireOptions{TTL: longTTL, Owner: "waiter"})
	s.awaitWaiters(t, a, key, 1)
	select {
	case r := <-waiter:
		t.Fatalf("waiter returned while the key was held: lease %v, err %v", r.lease, r.err)
	default:
	}
	mustRelease(t, a, held)
	released := time.Now()
	select {
	case r := <-waiter:
		if r.err != nil {
			t.Fatalf("waiter: %v", r.err)
		}
		t.Logf("waiter granted %v after the release returned", time.Since(released))
		if r.lease.Token <= held.Token {
			t.Errorf("waiter's token %d, want > %d", r.lease.Token, held.Token)
		}
		mustRelease(t, b, r.lease)
	case <-time.After(caps.GrantBound):
		t.Fatalf("waiter not granted within %v of the release", caps.GrantBound)
	}
}

// fifo: where FIFO is claimed, waiters are granted in arrival order.
func (s *suite) fifo(t *testing.T) {
	caps := s.f.Caps
	if !caps.FIFO {
		t.Skip("backend does not claim FIFO order of waiters")
	}
	const n = 5
	key := key(t, "k")
	a := s.locker(t)
	held := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
	order := make(chan int, n)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		l := s.locker(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Worst case: every waiter queues and is served within GrantBound.
			wait := time.Duration(2*n+1) * caps.GrantBound
			lease, err := l.Acquire(ctx(t, wait), key, lock.AcquireOptions{TTL: longTTL, Owner: fmt.Sprintf("waiter-%d", i)})
			if err != nil {
				errs <- fmt.Errorf("waiter %d: %w", i, err)
				return
			}
			order <- i // grants are serial, so this channel holds grant order
			if err := l.Release(ctx(t, time.Minute), lease); err != nil {
				errs <- fmt.Errorf("waiter %d: Release: %w", i, err)
			}
		}()
		s.awaitWaiters(t, a, key, i+1)
	}
	mustRelease(t, a, held)
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	close(order)
	var got []int
	for i := range order {
		got = append(got, i)
	}
	for i, w := range got {
		if w != i {
			t.Fatalf("grant order %v, want arrival order 0..%d", got, n-1)
		}
	}
}

// tryAcquireHeld: TryAcquire on a held key returns ErrNotAcquired at once,
// not after waiting, and leaves the holder holding.
func (s *suite) tryAcquireHeld(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	a, b := s.locker(t), s.locker(t)
	held := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
	// The holder's TTL is a minute: an implementation that waited would
	// run into this context's deadline instead of answering ErrNotAcquired.
	lease, err := b.TryAcquire(ctx(t, caps.GrantBound), key, lock.AcquireOptions{TTL: longTTL, Owner: "other"})
	if lease != nil {
		t.Fatalf("TryAcquire of a held key granted token %d", lease.Token)
	}
	wantErr(t, "TryAcquire of a held key", err, lock.ErrNotAcquired)
	if errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("TryAcquire waited for the holder: %v", err)
	}
	var he *lock.HeldError
	if errors.As(err, &he) && he.Owner != "" && he.Owner != "holder" {
		t.Errorf("HeldError names owner %q, want %q", he.Owner, "holder")
	}
	s.stillHeld(t, b, held)
	mustRelease(t, a, held)
	free, err := b.TryAcquire(ctx(t, time.Minute), key, lock.AcquireOptions{TTL: longTTL})
	if err != nil {
		t.Fatalf("TryAcquire of a released key: %v", err)
	}
	mustRelease(t, b, free)
}

// cancelledWaiter: a waiter whose context ends gets the context's error and
// is never left holding the lock (no ghost grant), even when the cancel
// races with the release.
func (s *suite) cancelledWaiter(t *testing.T) {
	caps := s.f.Caps
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	// afterwards checks that a third client gets the key promptly: a ghost
	// grant to the cancelled waiter (TTL one minute) would block it.
	afterwards := func(t *testing.T, key string) {
		t.Helper()
		lease, err := c.Acquire(ctx(t, caps.GrantBound), key, lock.AcquireOptions{TTL: longTTL, Owner: "afterwards"})
		if err != nil {
			t.Fatalf("key not free within %v after the holder released and the waiter gave up (ghost grant?): %v", caps.GrantBound, err)
		}
		mustRelease(t, c, lease)
	}
	for _, tc := range []struct {
		name     string
		deadline bool // the context's deadline, not a cancel, ends the wait
		want     error
	}{
		{"Cancel", false, context.Canceled},
		{"Deadline", true, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := key(t, "k")
			held := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
			wctx, cancel := context.WithCancel(context.Background())
			if tc.deadline {
				wctx, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			}
			defer cancel()
			waiter := acquireAsync(wctx, b, key, lock.AcquireOptions{TTL: longTTL, Owner: "waiter"})
			s.awaitWaiters(t, a, key, 1)
			if !tc.deadline {
				cancel()
			}
			select {
			case r := <-waiter:
				if r.lease != nil {
					t.Fatalf("cancelled waiter got token %d", r.lease.Token)
				}
				wantErr(t, "cancelled waiter", r.err, tc.want)
			case <-time.After(caps.GrantBound):
				t.Fatalf("waiter did not return within %v of its context ending", caps.GrantBound)
			}
			s.stillHeld(t, c, held)
			mustRelease(t, a, held)
			afterwards(t, key)
		})
	}
	t.Run("RacingRelease", func(t *testing.T) {
		key := key(t, "k")
		for round := range 20 {
			held := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
			wctx, cancel := context.WithCancel(context.Background())
			waiter := acquireAsync(wctx, b, key, lock.AcquireOptions{TTL: longTTL, Owner: "waiter"})
			s.awaitWaiters(t, a, key, 1)
			released := make(chan error, 1)
			go func() { released <- a.Release(ctx(t, time.Minute), held) }()
			cancel()
			if err := <-released; err != nil {
				t.Fatalf("round %d: Release: %v", round, err)
			}
			r := <-waiter
			switch {
			case r.err == nil:
				// The grant won the race: the waiter holds it and can free it.
				mustRelease(t, b, r.lease)
			case r.lease != nil:
				t.Fatalf("round %d: Acquire returned both a lease and %v", round, r.err)
			default:
				wantErr(t, fmt.Sprintf("round %d: cancelled waiter", round), r.err, context.Canceled)
			}
			afterwards(t, key)
		}
	})
}

// close: Close wakes waiters with ErrClosed without leaving them holding,
// later calls return ErrClosed, and a second Close is harmless.
func (s *suite) close(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	a, c := s.locker(t), s.locker(t)
	b := s.f.New(t)
	held := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
	waiter := acquireAsync(ctx(t, time.Minute), b, key, lock.AcquireOptions{TTL: longTTL, Owner: "waiter"})
	s.awaitWaiters(t, a, key, 1)
	if err := b.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	select {
	case r := <-waiter:
		if r.lease != nil {
			t.Fatalf("waiter of a closed locker got token %d", r.lease.Token)
		}
		wantErr(t, "waiter of a closed locker", r.err, lock.ErrClosed)
	case <-time.After(caps.GrantBound):
		t.Fatalf("waiter did not return within %v of Close", caps.GrantBound)
	}
	_, err := b.Acquire(ctx(t, time.Minute), key+".other", lock.AcquireOptions{TTL: longTTL})
	wantErr(t, "Acquire after Close", err, lock.ErrClosed)
	_, err = b.TryAcquire(ctx(t, time.Minute), key+".other", lock.AcquireOptions{TTL: longTTL})
	wantErr(t, "TryAcquire after Close", err, lock.ErrClosed)
	_, err = b.Inspect(ctx(t, time.Minute), key)
	wantErr(t, "Inspect after Close", err, lock.ErrClosed)
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	mustRelease(t, a, held)
	lease, err := c.Acquire(ctx(t, caps.GrantBound), key, lock.AcquireOptions{TTL: longTTL})
	if err != nil {
		t.Fatalf("key not free after the holder released and the closed locker's waiter left: %v", err)
	}
	mustRelease(t, c, lease)
}
