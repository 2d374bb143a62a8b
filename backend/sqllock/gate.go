package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/internal/localgate"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The local gate (lock/localgate) serializes, per key, the Acquire calls of
// one Locker: the first caller goes to the database, the others queue in
// process and get their turn when the caller before them is done. When the
// holder releases while a local caller waits, the lock is handed over
// directly (handoff.sql: one UPDATE instead of a DELETE, a notification and
// an INSERT), at most localgate.MaxHandoffs times in a row.

// handoff replaces lease by a new grant for t in one statement. On success
// it hands the new lease to t and ends the old one; otherwise t gets the
// turn without a lease and goes to the database.
func (l *Locker) handoff(ctx context.Context, lease *lock.Lease, t *localgate.Turn) error {
	handle := lock.NewHandle()
	opts := t.Opts
	sent := time.Now()
	var token *int64
	var contended *bool
	var queued bool
	err := l.queryRow(detached(ctx), l.q.handoff, []any{l.class, lease.Key, lease.Handle, int64(lease.Token),
		opts.Owner, handle, opts.Value, opts.TTL.Microseconds(), opts.LockDelay.Microseconds()}, &token, &contended, &queued)
	if err == nil && token == nil {
		err = pgx.ErrNoRows
	}
	switch {
	case err != nil && queued:
		// Waiters of other Lockers are queued ahead: no handoff. t goes
		// to the database (behind them), and the lease is released.
		l.gate.Decline(t)
		return l.release(ctx, lease)
	case err == nil:
		l.stats.handoffs.Add(1)
		next := l.newLease(lease.Key, handle, *token, opts, sent)
		// t's caller is counted as waiting; any other still waits.
		l.wanted.granted(next, *contended, true)
		l.gate.HandOver(t, lease, next)
		return kit.Released(lease, true)
	case errors.Is(err, pgx.ErrNoRows):
		// The lease no longer held the key: nothing changed.
		prev := l.gate.Decline(t)
		err := kit.Released(lease, false)
		if prev != lease {
			prev.End(err)
		}
		return err
	default:
		// If the statement committed, the key is held under a handle
		// nobody will use: abandon it. The old lease is then gone too;
		// if it did not commit, the old lease still holds.
		if outcomeUnknown(err) {
			l.abandon(lease.Key, handle, opts.TTL)
		}
		l.gate.Decline(t)
		return fmt.Errorf("%w (release outcome unknown)", l.fail("release", lease.Key, err))
	}
}
