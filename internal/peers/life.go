package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/internal/lifecycle"
	"github.com/lockgate/lockgate/lock"
)

// life is the open-to-closed life that every wrapper shares: the
// backends' lifecycle.State (the calls in progress and their openings, the
// background work they start, a context that ends at Close) with the
// wrappers' helpers on top. It is the wrappers' plumbing, not a library's
// behaviour: it adds nothing to what a grant guarantees.
type life struct{ *lifecycle.State }

func newLife() *life { return &life{lifecycle.New()} }

// autoRenew keeps lease alive through l (lock.KeepAlive) until it ends or
// the Locker closes. It is called by a call in progress, so the work
// always starts (lifecycle.State.Go refuses work only after Close has
// waited for the calls).
func (s *life) autoRenew(l lock.Locker, lease *lock.Lease) {
	s.Go(func() { lock.KeepAlive(s.Context(), l, lease) })
}

// join returns a context that ends with ctx or when the Locker closes.
func (s *life) join(ctx context.Context) (context.Context, context.CancelFunc) {
	c, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(s.Context(), cancel)
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
	case s.Context().Err() != nil:
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
