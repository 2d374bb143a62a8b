package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Multi-key acquires (lock.MultiLocker). One attempt is one transaction:
// fence.sql takes the keys' advisory locks in the order of their lock
// numbers, then acquireall.sql inserts or takes over every key row as
// acquire.sql does for one; the transaction commits only when every key
// was granted, and rolls back otherwise. So a caller holds all its keys or
// none, at every instant, and two callers whose key sets overlap, in any
// order, never deadlock: both take the shared locks in one order, and
// neither holds a key while it waits. Each key gets its own token, drawn
// under its advisory lock, so tokens strictly increase per key as with
// single acquires.
//
// Waiting: the caller subscribes to every key's release notifications,
// attempts, and on a refusal marks the first refusing key's row (waiters.sql:
// its release then notifies, its holder is told it is wanted) and sleeps
// until a notification for any of its keys, that holder's TTL (or
// lock-delay) runs out, or ctx ends. Multi-key callers do not enter the
// local gate (they would hold a key's turn while waiting for another's),
// and there is no order among waiters (not FIFO): a multi-key caller can be
// overtaken by single-key callers of its keys.

// AcquireAll implements lock.MultiLocker.
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return l.acquireAll(ctx, keys, opts, false)
}

// TryAcquireAll implements lock.MultiLocker: one attempt; a refusal is a
// *lock.HeldError for the first key found held (or a *lock.DelayedError
// for one within its lock-delay).
func (l *Locker) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return l.acquireAll(ctx, keys, opts, true)
}

func (l *Locker) acquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions, try bool) ([]*lock.Lease, error) {
	if err := kit.ValidateKeys(keys); err != nil {
		return nil, err
	}
	var leases []*lock.Lease
	_, err := l.life.Acquire(keys[0], opts, l.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		// opts is normalized here (a zero TTL is DefaultTTL with AutoRenew).
		if err := l.checkSupported(opts); err != nil {
			return nil, err
		}
		if opts.Mode == lock.ModeShared {
			return nil, &lock.UnsupportedError{Backend: "sqllock", Feature: kit.Needs(opts) &^ lock.FeatureLockDelay, Reason: ReasonMultiShared}
		}
		var err error
		if leases, err = l.waitAll(ctx, keys, opts, try); err == nil && opts.AutoRenew {
			for _, lease := range leases {
				go lock.KeepAlive(l.ctx, l, lease)
			}
		}
		return nil, err
	})
	if err != nil {
		return nil, err
	}
	return leases, nil
}

// waitAll makes attempts until one grants every key (one attempt when
// try).
func (l *Locker) waitAll(ctx context.Context, keys []string, opts lock.AcquireOptions, try bool) ([]*lock.Lease, error) {
	var wake chan struct{}
	if !try {
		// Subscribed before the first attempt: a release committed after
		// the attempt read its row wakes us.
		var unsubscribe func()
		wake, unsubscribe = l.subscribeAll(keys)
		defer unsubscribe()
		for _, k := range keys {
			defer l.wanted.startWaiting(k, opts.Handle)()
		}
	}
	retries := 0
	for {
		drain(wake)
		o := l.attemptAll(keys, opts, try)
		if o.leases != nil {
			if err := l.gaveUp(ctx, keys[0]); err != nil {
				// The grant raced the cancellation: never leave it behind.
				for _, lease := range o.leases {
					l.releaseQuietly(lease)
				}
				return nil, err
			}
			return o.leases, nil
		}
		if try {
			switch {
			case o.err != nil:
				return nil, o.err
			case o.delayed != nil:
				return nil, o.delayed
			}
			return nil, o.held
		}
		if err := l.awaitRetry(ctx, keys[0], wake, o.remaining, o.err, &retries); err != nil {
			return nil, err
		}
	}
}

// subscribeAll subscribes one wake-up channel to every key's release
// notifications (see listen.go).
func (l *Locker) subscribeAll(keys []string) (chan struct{}, func()) {
	wake := make(chan struct{}, 1)
	ws := make([]*waiter, len(keys))
	l.mu.Lock()
	for i, k := range keys {
		ws[i] = &waiter{key: k, wake: wake}
		l.subs[k] = append(l.subs[k], ws[i])
	}
	l.mu.Unlock()
	return wake, func() {
		for _, w := range ws {
			l.unsubscribe(w)
		}
	}
}

// multiOutcome is the result of one multi-key attempt: leases for every
// key, or the first key that refused (held, remaining, delayed as in
// outcome), or err.
type multiOutcome struct {
	leases    []*lock.Lease
	held      *lock.HeldError
	remaining time.Duration
	delayed   *lock.DelayedError
	err       error
}

// attemptAll runs one multi-key transaction. Like attempt, it ignores the
// caller's cancellation so that its outcome is always learned; when the
// commit's outcome cannot be learned, every key's grant is abandoned.
func (l *Locker) attemptAll(keys []string, opts lock.AcquireOptions, try bool) multiOutcome {
	l.stats.attempts.Add(1)
	handles := make([]string, len(keys))
	for i := range keys {
		handles[i] = opts.Handle
		if handles[i] == "" {
			handles[i] = lock.NewHandle()
		}
	}
	c, cancel := l.roundTrip(detached(l.ctx))
	defer cancel()
	sent := time.Now()
	granted, committed, err := l.acquireAllTx(c, keys, handles, opts)
	switch {
	case err != nil && committed:
		for i, k := range keys {
			l.abandon(k, handles[i], opts.TTL)
		}
		return multiOutcome{err: fmt.Errorf("%w (outcome unknown)", l.fail("acquire", keys[0], err))}
	case err != nil:
		return multiOutcome{err: l.fail("acquire", keys[0], err)}
	case len(granted) == len(keys):
		leases := make([]*lock.Lease, len(keys))
		for i, k := range keys {
			g := granted[k]
			leases[i] = l.newLease(k, handles[i], g.token, opts, sent)
			l.wanted.granted(leases[i], g.contended, !try)
		}
		return multiOutcome{leases: leases}
	}
	l.stats.held.Add(1)
	// The first key that refused: what keeps it, and (for a waiter) its
	// row marked so that its release notifies.
	key := keys[0]
	for _, k := range keys {
		if _, ok := granted[k]; !ok {
			key = k
			break
		}
	}
	o := l.refusal(c, key, try, 0, false)
	return multiOutcome{held: o.held, remaining: o.remaining, delayed: o.delayed, err: o.err}
}

type grantedRow struct {
	token     int64
	contended bool
}

// acquireAllTx runs the transaction: the keys granted, when all were, and
// the transaction committed; else the keys the attempt would have granted
// and a rollback. maybeCommitted reports an error whose commit may have
// taken effect.
func (l *Locker) acquireAllTx(ctx context.Context, keys, handles []string, opts lock.AcquireOptions) (granted map[string]grantedRow, maybeCommitted bool, err error) {
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return nil, false, err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, l.q.fence, l.class, keys); err != nil {
		return nil, false, err
	}
	rows, err := tx.Query(ctx, l.q.acquireAll, keys, handles, opts.Owner, opts.Value, opts.TTL.Microseconds(), opts.LockDelay.Microseconds())
	if err != nil {
		return nil, false, err
	}
	granted = make(map[string]grantedRow, len(keys))
	for rows.Next() {
		var k string
		var g grantedRow
		if err := rows.Scan(&k, &g.token, &g.contended); err != nil {
			rows.Close()
			return nil, false, err
		}
		granted[k] = g
	}
	if err := rows.Err(); err != nil {
		return nil, false, err
	}
	if len(granted) < len(keys) {
		return granted, false, tx.Rollback(ctx)
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, outcomeUnknown(err), err
	}
	return granted, false, nil
}

// refusal reads what keeps key from a caller: the live holder, a
// lock-delay, or waiters queued ahead of ticket. A waiter (not try) marks
// the holder's row (see attempt) and, with enqueue, joins the queue where
// readers are involved or refreshes its ticket (the outcome's ticket); a
// queued waiter sleeps at most queueRefresh, so that its ticket stays live.
func (l *Locker) refusal(ctx context.Context, key string, try bool, ticket int64, enqueue bool) outcome {
	if try {
		var live bool
		info, remaining, err := l.inspect(ctx, l.q.held, []any{key}, key, &live)
		switch {
		case errors.Is(err, lock.ErrNotFound):
			// Free of holders: freed since, or waiters are queued.
			return outcome{held: &lock.HeldError{Key: key}}
		case err != nil:
			return outcome{held: &lock.HeldError{Key: key}, err: err}
		case !live:
			return outcome{held: &lock.HeldError{Key: key}, remaining: remaining,
				delayed: &lock.DelayedError{Key: key, Until: info.Expires}}
		}
		return outcome{held: &lock.HeldError{Key: key, Owner: info.Owner, Token: info.Token, Expires: info.Expires}, remaining: remaining}
	}
	now := time.Now()
	var (
		queued         *int64
		owner          *string
		token, micros  *int64
		value          []byte
		live, notified *bool
		ahead          *int64
	)
	err := l.queryRow(ctx, l.q.waiters, []any{key, l.names.channel, ticket, queueTTL.Microseconds(), enqueue},
		&queued, &owner, &token, &value, &micros, &live, &notified, &ahead)
	if err != nil {
		return outcome{held: &lock.HeldError{Key: key}, err: l.fail("acquire", key, err)}
	}
	o := outcome{held: &lock.HeldError{Key: key}}
	if queued != nil {
		o.ticket = *queued
	}
	switch {
	case owner != nil && *live:
		o.remaining = time.Duration(*micros) * time.Microsecond
		o.held = &lock.HeldError{Key: key, Owner: *owner, Token: lock.Token(*token), Expires: now.Add(o.remaining)}
	case owner != nil:
		o.remaining = time.Duration(*micros) * time.Microsecond
		o.delayed = &lock.DelayedError{Key: key, Until: now.Add(o.remaining)}
	case ahead != nil:
		o.remaining = time.Duration(*ahead) * time.Microsecond
	}
	if o.ticket != 0 || ahead != nil {
		// Queued, or behind queued waiters: come back before the
		// ticket (or the one ahead) lapses.
		o.remaining = min(o.remaining, queueRefresh)
	}
	return o
}
