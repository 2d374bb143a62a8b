package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Renew implements lock.Locker: compare-and-extend on the database's clock.
// The renewal also reads whether a waiter marked the row: a lease rebuilt
// with kit.NewLease is told it is wanted from its first Renew on (and
// then through notifications like the leases this Locker granted).
func (l *Locker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return l.life.Renew(lease, ttl, func(ttl time.Duration) error { return l.renew(ctx, lease, ttl) })
}

func (l *Locker) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	sent := time.Now()
	var token int64
	var contended bool
	var err error
	if lease.Mode != lock.ModeShared {
		err = l.queryRow(ctx, l.q.renew, []any{lease.Key, lease.Handle, int64(lease.Token), ttl.Microseconds()}, &token, &contended)
	}
	if lease.Mode == lock.ModeShared || errors.Is(err, pgx.ErrNoRows) {
		// A shared grant, or a lease rebuilt from one's fields.
		var found bool
		found, contended, err = l.renewShared(ctx, lease.Key, lease.Handle, lease.Token, ttl)
		if err == nil && !found {
			err = pgx.ErrNoRows
		}
	}
	switch {
	case err == nil:
		if err := kit.Renewed(lease, sent, ttl, true); err != nil {
			return err
		}
		l.wanted.renewed(lease, contended)
		return nil
	case errors.Is(err, pgx.ErrNoRows):
		return kit.Renewed(lease, sent, ttl, false)
	default:
		return l.fail("renew", lease.Key, err)
	}
}

// Release implements lock.Locker: compare-and-delete and a notification to
// the key's waiters in one statement, or, when a caller of this Locker
// waits for the key, a handoff to it.
func (l *Locker) Release(ctx context.Context, lease *lock.Lease) error {
	return l.life.Release(lease, func() error { return l.gate.Release(ctx, lease) })
}

func (l *Locker) release(ctx context.Context, lease *lock.Lease) error {
	var held bool
	var notified *bool
	var err error
	if lease.Mode != lock.ModeShared {
		err = l.queryRow(ctx, l.q.release, []any{lease.Key, lease.Handle, int64(lease.Token), l.names.channel}, &held, &notified)
	}
	if lease.Mode == lock.ModeShared || errors.Is(err, pgx.ErrNoRows) {
		// A shared grant (or a lease rebuilt from one's fields, whose
		// mode is unknown).
		var found bool
		found, held, err = l.releaseShared(ctx, lease.Key, lease.Handle, lease.Token)
		if err == nil && !found {
			err = pgx.ErrNoRows
		}
	}
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (outcome unknown)", l.fail("release", lease.Key, err))
	}
	if err == nil {
		l.deliver(lease.Key) // wake a local waiter without waiting for the notification
	}
	err = kit.Released(lease, held)
	if held {
		l.gate.EndHolder(lease, lock.ErrReleased)
	} else {
		l.gate.EndHolder(lease, err)
	}
	return err
}

// releaseQuietly frees a grant nobody will use (one that raced its
// caller's cancellation). If the database cannot be reached, the grant is
// abandoned: deleted in the background as soon as possible.
func (l *Locker) releaseQuietly(lease *lock.Lease) {
	if err := l.release(context.Background(), lease); lock.IsRetryable(err) {
		l.abandon(lease.Key, lease.Handle, lease.TTL())
	}
	lease.End(lock.ErrReleased)
}

// abandon deletes, in the background, a grant whose holder is gone or
// never learned of it, retrying until the database answers, the grant's
// TTL is over (then it has expired by itself) or the Locker is closed.
// Once Close has begun nothing is started: the grant expires at its TTL.
func (l *Locker) abandon(key, handle string, ttl time.Duration) {
	if l.life.Closed() {
		return
	}
	l.life.Go(func() {
		deadline := time.Now().Add(ttl)
		ctx, cancel := context.WithDeadline(l.ctx, deadline)
		defer cancel()
		lock.Retry(ctx, l.cfg.Retry, nil, func(ctx context.Context) error {
			c, cancel := l.roundTrip(ctx)
			defer cancel()
			_, err := l.pool.Exec(c, l.q.abandon, key, handle, l.names.channel)
			if err != nil {
				l.cfg.Logger.Warn("sqllock: undoing an acquire whose outcome is unknown", "key", key, "err", err)
				return l.fail("abandon", key, err)
			}
			return nil
		})
	})
}
