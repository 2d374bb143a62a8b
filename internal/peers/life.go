package peers

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// life is the open-to-closed life that every wrapper shares: the calls in
// progress, the auto-renewals they start, and a context that ends at
// Close. It is the wrappers' plumbing, not a library's behaviour: it adds
// nothing to what a grant guarantees.
type life struct {
	ctx    context.Context // ends when Close begins
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	calls  sync.WaitGroup // calls between begin and end
	bg     sync.WaitGroup // background work started by those calls
}

func newLife() *life {
	ctx, cancel := context.WithCancel(context.Background())
	return &life{ctx: ctx, cancel: cancel}
}

// begin registers a call; false once Close has begun.
func (s *life) begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.calls.Add(1)
	return true
}

func (s *life) end() { s.calls.Done() }

// goBackground runs f as work Close waits for. Only a call in progress
// (between begin and end) may start it, so that Close, which waits for the
// calls first, never sees the count rise while it waits.
func (s *life) goBackground(f func()) {
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
}

// autoRenew keeps lease alive through l (lock.KeepAlive) until it ends or
// the Locker closes.
func (s *life) autoRenew(l lock.Locker, lease *lock.Lease) {
	s.goBackground(func() { lock.KeepAlive(s.ctx, l, lease) })
}

// close ends the context and waits for the calls, then for the background
// work; false if Close had already begun.
func (s *life) close() bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.calls.Wait()
	s.bg.Wait()
	return true
}

// join returns a context that ends with ctx or when the Locker closes.
func (s *life) join(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.ctx, cancel)
	return c, func() { stop(); cancel() }
}

// bounded bounds one request by d when ctx has no deadline of its own (the
// lock.Locker contract: round trips are bounded even without one).
func bounded(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, d)
}

// fail turns the error of op on key into what the caller sees:
// lock.ErrClosed once the Locker is closed, the caller's context error once
// ctx ended, lock.ErrUnavailable otherwise.
func (s *life) fail(ctx context.Context, who, op, key string, err error) error {
	switch {
	case s.ctx.Err() != nil:
		return lock.ErrClosed
	case ctx.Err() != nil:
		if err != nil && !errors.Is(err, ctx.Err()) {
			return fmt.Errorf("%s: %s %q: %w (last error: %v)", who, op, key, ctx.Err(), err)
		}
		return fmt.Errorf("%s: %s %q: %w", who, op, key, ctx.Err())
	case errors.Is(err, lock.ErrUnavailable):
		return err
	default:
		return fmt.Errorf("%w: %s: %s %q: %w", lock.ErrUnavailable, who, op, key, err)
	}
}

// cleanupTimeout bounds the requests that undo a grant which raced with
// the caller's cancellation, sent on a context of their own.
const cleanupTimeout = 5 * time.Second
