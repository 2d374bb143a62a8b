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

// Shared locks and semaphores. A key held shared has a main row like any
// held key, with mode 1, the semaphore's permits (0 for a read lock), an
// empty handle (no lease presents one), the latest grant's token and the
// latest expiry of its holders, and one row per grant in the holders
// table. An exclusive acquire therefore finds the key held until the last
// shared holder ends (acquire.sql is unchanged for it), and a shared
// acquire finds an exclusive holder in the main row.
//
// A shared attempt is one transaction holding the key's advisory lock
// (acquire.sql's): it reads the main row, the live holders and the queue
// (shared_state.sql) and then either grants (shared_grant.sql: a holder row
// with a fresh token, the main row made or kept shared), or fails at once
// when the live holders hold the key with another number of permits
// (lock.ErrPermitsMismatch), or refuses and joins the key's queue
// (enqueue.sql; queue.go). Releases and renewals of shared grants take the
// advisory lock too, so that the main row's expiry always covers every
// live holder. Shared callers do not enter the local gate (a Locker's
// readers hold together).

// holdersMax bounds nothing: a read lock has any number of holders.

// acquireShared waits for a shared grant (or a semaphore permit) of key.
func (l *Locker) acquireShared(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	var wake chan struct{}
	var ticket int64
	if !try {
		var unsubscribe func()
		wake, unsubscribe = l.subscribeAll([]string{key})
		defer unsubscribe()
		defer func() {
			if ticket != 0 {
				l.dequeue(key, ticket)
			}
		}()
		defer l.wanted.startWaiting(key, opts.Handle)()
	}
	retries := 0
	for {
		drain(wake)
		o := l.attemptShared(key, opts, try, &ticket)
		if o.lease != nil {
			ticket = 0 // the grant left the queue
			if err := l.gaveUp(ctx, key); err != nil {
				l.releaseQuietly(o.lease)
				return nil, err
			}
			if opts.AutoRenew {
				go lock.KeepAlive(l.ctx, l, o.lease)
			}
			return o.lease, nil
		}
		if o.err != nil && errors.Is(o.err, lock.ErrPermitsMismatch) {
			return nil, o.err
		}
		if try {
			if o.err != nil {
				return nil, o.err
			}
			return nil, o.held
		}
		// Refused, a waiter is queued: it comes back before its ticket lapses.
		if err := l.awaitRetry(ctx, key, wake, min(o.remaining, queueRefresh), o.err, &retries); err != nil {
			return nil, err
		}
	}
}

// attemptShared runs one shared attempt; *ticket is the caller's place in
// the queue (0: none), updated when it joins. Like attempt, it ignores the
// caller's cancellation; a commit whose outcome is unknown is abandoned.
func (l *Locker) attemptShared(key string, opts lock.AcquireOptions, try bool, ticket *int64) outcome {
	l.stats.attempts.Add(1)
	handle := opts.Handle
	if handle == "" {
		handle = lock.NewHandle()
	}
	c, cancel := l.roundTrip(detached(l.ctx))
	defer cancel()
	sent := time.Now()
	tx, err := l.pool.Begin(c)
	if err != nil {
		return outcome{err: l.fail("acquire", key, err)}
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(c, "SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))", l.class, key); err != nil {
		return outcome{err: l.fail("acquire", key, err)}
	}
	var (
		mode, permits              *int32
		live                       *bool
		micros, token, firstMicros *int64
		aheadMicros                *int64
		owner                      *string
		n                          int64
	)
	if err := tx.QueryRow(c, l.q.sharedState, key, *ticket).Scan(&mode, &permits, &live, &micros, &owner, &token,
		&n, &firstMicros, &aheadMicros); err != nil {
		return outcome{err: l.fail("acquire", key, err)}
	}
	us := func(p *int64) time.Duration {
		if p == nil {
			return 0
		}
		return time.Duration(*p) * time.Microsecond
	}
	now := time.Now()
	var refused *outcome
	byHolders := false
	switch {
	case mode != nil && *mode == 0 && *live:
		refused = &outcome{held: &lock.HeldError{Key: key, Owner: *owner, Token: lock.Token(*token), Expires: now.Add(us(micros))}, remaining: us(micros)}
		byHolders = true
	case mode != nil && *mode == 0:
		until := now.Add(us(micros))
		refused = &outcome{held: &lock.HeldError{Key: key}, remaining: us(micros), delayed: &lock.DelayedError{Key: key, Until: until}}
	case mode != nil && n > 0 && int(*permits) != opts.Permits:
		return outcome{err: fmt.Errorf("sqllock: acquire %q with %d permits: %w (held with %d)", key, opts.Permits, lock.ErrPermitsMismatch, *permits)}
	case mode != nil && n > 0 && opts.Permits > 0 && n >= int64(opts.Permits):
		refused = &outcome{held: &lock.HeldError{Key: key, Token: lock.Token(*token), Expires: now.Add(us(firstMicros))}, remaining: us(firstMicros)}
		byHolders = true
	case aheadMicros != nil:
		refused = &outcome{held: &lock.HeldError{Key: key}, remaining: us(aheadMicros)}
	}
	if refused != nil {
		l.stats.held.Add(1)
		if try {
			if refused.delayed != nil {
				return outcome{err: refused.delayed}
			}
			return *refused
		}
		var notified *bool
		if err := tx.QueryRow(c, l.q.enqueue, key, *ticket, opts.Permits, queueTTL.Microseconds(), byHolders, l.names.channel).Scan(ticket, &notified); err != nil {
			return outcome{err: l.fail("acquire", key, err)}
		}
		if err := tx.Commit(c); err != nil {
			return outcome{err: l.fail("acquire", key, err)}
		}
		return *refused
	}
	var granted int64
	var contended bool
	var notified *bool
	if err := tx.QueryRow(c, l.q.sharedGrant, key, handle, opts.Owner, opts.Value, opts.TTL.Microseconds(), opts.Permits,
		*ticket, l.names.channel).Scan(&granted, &contended, &notified); err != nil {
		return outcome{err: l.fail("acquire", key, err)}
	}
	if err := tx.Commit(c); err != nil {
		if outcomeUnknown(err) {
			l.abandonShared(key, handle, lock.Token(granted), opts.TTL)
		}
		return outcome{err: fmt.Errorf("%w (outcome unknown)", l.fail("acquire", key, err))}
	}
	*ticket = 0
	lease := kit.NewLease(kit.Grant{
		Key: key, Owner: opts.Owner, Token: lock.Token(granted), Handle: handle, Value: opts.Value,
		TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor, Mode: lock.ModeShared, Permits: opts.Permits,
	})
	l.wanted.granted(lease, contended, !try)
	return outcome{lease: lease}
}

// sharedTx runs query in a transaction holding key's advisory lock and
// scans its row; pgx.ErrNoRows rolls it back.
func (l *Locker) sharedTx(ctx context.Context, key, query string, args []any, dest ...any) error {
	c, cancel := l.roundTrip(ctx)
	defer cancel()
	tx, err := l.pool.Begin(c)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(c, "SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))", l.class, key); err != nil {
		return err
	}
	if err := tx.QueryRow(c, query, args...).Scan(dest...); err != nil {
		return err
	}
	return tx.Commit(c)
}

// releaseShared deletes the shared grant (key, handle, token): found says
// whether there was one, held whether it was live.
func (l *Locker) releaseShared(ctx context.Context, key, handle string, token lock.Token) (found, held bool, err error) {
	var notified *bool
	err = l.sharedTx(ctx, key, l.q.sharedRelease, []any{key, handle, int64(token), l.names.channel}, &held, &notified)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	l.deliver(key)
	return true, held, nil
}

// renewShared extends the shared grant (key, handle, token): found says
// whether it is held.
func (l *Locker) renewShared(ctx context.Context, key, handle string, token lock.Token, ttl time.Duration) (found, contended bool, err error) {
	err = l.sharedTx(ctx, key, l.q.sharedRenew, []any{key, handle, int64(token), ttl.Microseconds()}, &contended)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return false, false, nil
	case err != nil:
		return false, false, err
	}
	return true, contended, nil
}

// abandonShared deletes, in the background, a shared grant whose commit's
// outcome is unknown (see abandon).
func (l *Locker) abandonShared(key, handle string, token lock.Token, ttl time.Duration) {
	if l.life.Closed() {
		return
	}
	l.life.Go(func() {
		ctx, cancel := context.WithDeadline(l.ctx, time.Now().Add(ttl))
		defer cancel()
		lock.Retry(ctx, l.cfg.Retry, nil, func(ctx context.Context) error {
			if _, _, err := l.releaseShared(ctx, key, handle, token); err != nil {
				return l.fail("abandon", key, err)
			}
			return nil
		})
	})
}

// inspectShared completes info for a key held shared: its holders, oldest
// first, and the oldest's owner, token, value and expiry.
func (l *Locker) inspectShared(ctx context.Context, info *lock.LockInfo) (*lock.LockInfo, error) {
	c, cancel := l.roundTrip(ctx)
	defer cancel()
	now := time.Now()
	rows, err := l.pool.Query(c, l.q.holders, info.Key)
	if err != nil {
		return nil, l.fail("inspect", info.Key, err)
	}
	defer rows.Close()
	info.Holders = nil
	for rows.Next() {
		var h lock.HolderInfo
		var token, micros int64
		if err := rows.Scan(&h.Owner, &token, &h.Value, &micros); err != nil {
			return nil, l.fail("inspect", info.Key, err)
		}
		h.Token = lock.Token(token)
		h.Expires = now.Add(time.Duration(micros) * time.Microsecond)
		info.Holders = append(info.Holders, h)
	}
	if err := rows.Err(); err != nil {
		return nil, l.fail("inspect", info.Key, err)
	}
	if len(info.Holders) == 0 {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, info.Key)
	}
	first := info.Holders[0]
	info.Owner, info.Token, info.Value, info.Expires = first.Owner, first.Token, first.Value, first.Expires
	return info, nil
}
