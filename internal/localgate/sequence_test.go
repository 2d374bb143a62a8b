package localgate

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// fakeServer is a Backend whose server operations grant at once (or fail
// while failing is set) and count what the Sequence asked of them.
type fakeServer struct {
	s                  *Sequence
	attempts, handoffs atomic.Int32
	releases           atomic.Int32
	fail               chan error // when non-nil, Attempt blocks for the error to return
	n                  atomic.Int32
}

func newFakeServer() *fakeServer {
	f := &fakeServer{}
	f.s = NewSequence(Backend{
		Ctx: context.Background(),
		Attempt: func(key string, _ lock.AcquireOptions, _ bool, _ lock.Token) Outcome {
			f.attempts.Add(1)
			if f.fail != nil {
				if err := <-f.fail; err != nil {
					return Outcome{Err: err}
				}
			}
			return Outcome{Lease: grant(key, fmt.Sprint("h", f.n.Add(1)))}
		},
		Subscribe: func(context.Context, string) *Subscription {
			return &Subscription{Wake: make(chan struct{}), Close: func() {}}
		},
		SubscribeFirst: true,
		Retry:          lock.DefaultBackoff(),
		Handoff: func(_ context.Context, lease *lock.Lease, t *Turn) error {
			f.handoffs.Add(1)
			f.s.HandOver(t, lease, grant(lease.Key, fmt.Sprint("h", f.n.Add(1))))
			return kit.Released(lease, true)
		},
		Release: func(_ context.Context, lease *lock.Lease) error {
			f.releases.Add(1)
			f.s.EndHolder(lease, lock.ErrReleased)
			return kit.Released(lease, true)
		},
		GaveUp:  func(ctx context.Context, _ string) error { return ctx.Err() },
		Discard: func(lease *lock.Lease) { lease.End(lock.ErrReleased) },
	})
	return f
}

// acquireAsync starts Acquire on a goroutine and returns its result once
// the caller is queued in the gate.
func acquireAsync(t *testing.T, f *fakeServer, ctx context.Context, key string) <-chan *lock.Lease {
	t.Helper()
	done := make(chan *lock.Lease, 1)
	before := f.s.queued(key)
	go func() {
		lease, err := f.s.Acquire(ctx, key, lock.AcquireOptions{}, false)
		if err != nil {
			t.Errorf("queued Acquire: %v", err)
		}
		done <- lease
	}()
	for f.s.queued(key) == before {
		time.Sleep(time.Millisecond)
	}
	return done
}

// TestSequenceHandsOverAtMostMaxHandoffs: a release while a local caller
// waits hands the key over, MaxHandoffs times in a row; the next release
// frees it at the server, and the next waiter then attempts there.
func TestSequenceHandsOverAtMostMaxHandoffs(t *testing.T) {
	f := newFakeServer()
	ctx := context.Background()
	lease, err := f.s.Acquire(ctx, "k", lock.AcquireOptions{}, false)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i <= MaxHandoffs; i++ {
		next := acquireAsync(t, f, ctx, "k")
		if err := f.s.Release(ctx, lease); err != nil {
			t.Fatalf("release %d: %v", i, err)
		}
		lease = <-next
		if lease == nil {
			t.FailNow()
		}
	}
	if h, r, a := f.handoffs.Load(), f.releases.Load(), f.attempts.Load(); h != MaxHandoffs || r != 1 || a != 2 {
		t.Errorf("%d handoffs, %d releases, %d attempts; want %d, 1, 2", h, r, a, MaxHandoffs)
	}
	if err := f.s.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
	if q := f.s.queued("k"); q != -1 {
		t.Errorf("gate still has key after the last release (%d queued)", q)
	}
}

// TestSequenceFailedAttemptPassesTurn: when the caller at the server
// fails, the gate passes the turn on, and the next caller attempts.
func TestSequenceFailedAttemptPassesTurn(t *testing.T) {
	f := newFakeServer()
	f.fail = make(chan error, 2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	first := make(chan error, 1)
	go func() {
		_, err := f.s.Acquire(ctx, "k", lock.AcquireOptions{}, false)
		first <- err
	}()
	for f.attempts.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	next := acquireAsync(t, f, ctx, "k")
	boom := errors.New("server down")
	f.fail <- boom
	if err := <-first; !errors.Is(err, boom) {
		t.Fatalf("first Acquire: %v, want %v", err, boom)
	}
	f.fail <- nil
	if lease := <-next; lease == nil {
		t.Fatal("next caller got no lease")
	}
	if a := f.attempts.Load(); a != 2 {
		t.Errorf("%d attempts, want 2", a)
	}
}

// TestSequenceWaitsForRelease: a refusal subscribes (after it, when
// subscribing is not free) and tries again at once; a refusal by a known
// holder is then waited out until its release is announced, and the next
// attempt must beat the largest token a refusal named (the retry right
// after subscribing carries none yet, as redlock's loop did).
func TestSequenceWaitsForRelease(t *testing.T) {
	wake := make(chan struct{}, 1)
	attempts := make(chan lock.Token, 3)
	var subscribed, n atomic.Int32
	s := NewSequence(Backend{
		Ctx: context.Background(),
		Attempt: func(key string, _ lock.AcquireOptions, _ bool, floor lock.Token) Outcome {
			attempts <- floor
			if i := n.Add(1); i < 3 {
				return Outcome{Held: &lock.HeldError{Key: key, Token: lock.Token(10 + i)},
					AwaitRelease: true, Await: time.Hour}
			}
			return Outcome{Lease: grant(key, "h")}
		},
		Subscribe: func(context.Context, string) *Subscription {
			subscribed.Add(1)
			return &Subscription{Wake: wake, Close: func() {}}
		},
		Retry:   lock.DefaultBackoff(),
		GaveUp:  func(ctx context.Context, _ string) error { return ctx.Err() },
		Discard: func(lease *lock.Lease) { lease.End(lock.ErrReleased) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := s.Acquire(ctx, "k", lock.AcquireOptions{}, false)
		done <- err
	}()
	// next awaits the next attempt; an Acquire that returns instead (its
	// context ends after 10 s) fails the test rather than hanging it.
	next := func(what string) lock.Token {
		t.Helper()
		select {
		case f := <-attempts:
			return f
		case err := <-done:
			t.Fatalf("no %s: Acquire returned %v", what, err)
			return 0
		}
	}
	if f := next("first attempt"); f != 0 {
		t.Errorf("first attempt's floor %d, want 0", f)
	}
	if f := next("attempt right after subscribing"); f != 0 {
		t.Errorf("attempt right after subscribing: floor %d, want 0", f)
	}
	if n := subscribed.Load(); n != 1 {
		t.Errorf("subscribed %d times, want 1", n)
	}
	wake <- struct{}{}
	select {
	case f := <-attempts:
		if f != 12 {
			t.Errorf("attempt after the release: floor %d, want 12", f)
		}
	case err := <-done:
		t.Fatalf("no attempt after the release was announced: %v", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
