package sqllock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/internal/localgate"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Acquire implements lock.Locker. Callers of one Locker queue for a key in
// process, in arrival order; the first of them goes to the database, and a
// release hands the lock straight to the next (one UPDATE instead of a
// DELETE and an INSERT, at most localgate.MaxHandoffs times in a row). The one at
// the database subscribes to the key's release notifications, attempts, and
// while the key is held sleeps until a notification arrives or the holder's
// TTL (as reported by the database) runs out, then attempts again. Across
// Lockers there is no order (not FIFO).
func (l *Locker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: one attempt. A key held by another
// owner gives a *lock.HeldError naming the holder's owner, token and
// expiry.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

func (l *Locker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	return l.life.Acquire(key, opts, l.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := l.checkSupported(opts); err != nil {
			return nil, err
		}
		if opts.Mode == lock.ModeShared {
			if opts.LockDelay > 0 {
				return nil, &lock.UnsupportedError{Backend: "sqllock", Feature: lock.FeatureLockDelay, Reason: ReasonSharedLockDelay}
			}
			return l.acquireShared(ctx, key, opts, try)
		}
		if !try {
			// The caller is about to wait: a lease of this Locker on key
			// hears it now, in process (wanted.go).
			defer l.wanted.startWaiting(key, opts.Handle)()
		}
		return l.gate.Acquire(ctx, key, opts, try)
	})
}

// gaveUp is the error to return instead of a grant when the caller's
// context or the Locker ended meanwhile.
func (l *Locker) gaveUp(ctx context.Context, key string) error {
	switch {
	case l.ctx.Err() != nil:
		return lock.ErrClosed
	case ctx.Err() != nil:
		return fmt.Errorf("sqllock: acquire %q: %w", key, ctx.Err())
	}
	return nil
}

// awaitRetry is the turn of a waiter outside the local gate (multi.go,
// shared.go) after an attempt that granted nothing: it returns the error
// to give up with when the caller's context or the Locker ended (naming
// attemptErr, the attempt's error, if any), when attemptErr is not
// retryable, or when retries (the count of failed attempts in a row, kept
// by the caller) are spent; otherwise it sleeps until a release
// notification on wake, the refusal's remaining time (attemptErr nil,
// plus a little, so that the waiter arrives after the expiry) or the
// retry backoff passes, or the caller gives up, and then returns gaveUp.
func (l *Locker) awaitRetry(ctx context.Context, key string, wake <-chan struct{}, remaining time.Duration, attemptErr error, retries *int) error {
	if err := l.gaveUp(ctx, key); err != nil {
		if attemptErr != nil {
			return fmt.Errorf("%w (last attempt: %w)", err, attemptErr)
		}
		return err
	}
	var pause time.Duration
	if attemptErr == nil {
		*retries = 0
		pause = remaining + time.Millisecond + rand.N(time.Millisecond)
	} else {
		if !lock.IsRetryable(attemptErr) {
			return attemptErr
		}
		*retries++
		p, again := l.cfg.Retry.Backoff(*retries)
		if !again {
			return attemptErr
		}
		pause = p
	}
	t := time.NewTimer(pause)
	defer t.Stop()
	select {
	case <-wake:
	case <-t.C:
	case <-ctx.Done():
	case <-l.ctx.Done():
	}
	return l.gaveUp(ctx, key)
}

// drain empties wake (nil: nothing to empty) before an attempt, so that
// only a release announced after the attempt read its rows wakes the
// waiter early.
func drain(wake <-chan struct{}) {
	select {
	case <-wake:
	default:
	}
}

// attemptOnce is the local gate's Attempt: one run of acquire.sql. A
// refusal names the holder and its remaining TTL on the database's clock:
// the waiter sleeps until then (plus a little, so that it arrives after
// the expiry) unless the release is announced first.
func (l *Locker) attemptOnce(key string, opts lock.AcquireOptions, try bool, _ lock.Token) localgate.Outcome {
	o := l.attempt(key, opts, try)
	if o.delayed != nil && try {
		return localgate.Outcome{Err: o.delayed}
	}
	return localgate.Outcome{Lease: o.lease, Held: o.held, Err: o.err,
		AwaitRelease: true, Await: o.remaining + time.Millisecond + rand.N(time.Millisecond)}
}

// subscribeGate is the local gate's Subscribe: an in-process waiter on the
// key's notifications, which costs no round trip, so the gate subscribes
// before the first attempt.
func (l *Locker) subscribeGate(_ context.Context, key string) *localgate.Subscription {
	w := l.subscribe(key)
	done := l.holdTicket(key)
	return &localgate.Subscription{Wake: w.wake, Close: func() { l.unsubscribe(w); done() }}
}

// outcome of one acquire attempt.
type outcome struct {
	lease     *lock.Lease
	held      *lock.HeldError
	remaining time.Duration // the holder's remaining TTL (or lock-delay), on the database's clock
	delayed   *lock.DelayedError
	ticket    int64 // the waiter's place in the key's queue (queue.go)
	err       error
}

// attempt runs acquire.sql once. Its context ignores the caller's
// cancellation, so that a grant is always learned and can be undone; when
// the outcome cannot be learned (the connection broke after the statement
// was sent) the grant, if any, is abandoned.
func (l *Locker) attempt(key string, opts lock.AcquireOptions, try bool) outcome {
	l.stats.attempts.Add(1)
	handle := opts.Handle
	if handle == "" {
		handle = lock.NewHandle()
	}
	c := detached(l.ctx)
	sent := time.Now()
	var token int64
	var contended bool
	var ticket int64
	if !try {
		ticket = l.ticket(key)
	}
	err := l.queryRow(c, l.q.acquire, []any{l.class, key, opts.Owner, handle, opts.Value, opts.TTL.Microseconds(), opts.LockDelay.Microseconds(), ticket, l.names.channel}, &token, &contended, new(*bool))
	switch {
	case err == nil:
		if ticket != 0 {
			l.setTicket(key, 0) // the grant left the queue
		}
		lease := l.newLease(key, handle, token, opts, sent)
		l.wanted.granted(lease, contended, !try)
		return outcome{lease: lease}
	case errors.Is(err, pgx.ErrNoRows):
		l.stats.held.Add(1)
		// A waiter marks the row so that its release notifies and its
		// holder is told (wanted.go); a TryAcquire only reads it.
		o := l.refusal(c, key, try, ticket, !try)
		if o.ticket != 0 && o.ticket != ticket {
			l.setTicket(key, o.ticket)
		}
		return o
	default:
		if outcomeUnknown(err) {
			l.abandon(key, handle, opts.TTL)
		}
		return outcome{err: l.fail("acquire", key, err)}
	}
}

// newLease is the lease of a grant that acquire.sql or handoff.sql made for
// opts, in a statement sent at sent.
func (l *Locker) newLease(key, handle string, token int64, opts lock.AcquireOptions, sent time.Time) *lock.Lease {
	return kit.NewLease(kit.Grant{
		Key: key, Owner: opts.Owner, Token: lock.Token(token), Handle: handle, Value: opts.Value,
		TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
	})
}
