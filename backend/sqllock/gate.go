package sqllock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/lock"
)

// MaxLocalHandoffs bounds how many times in a row a lease is handed from
// one caller to the next waiter of the same Locker without freeing the row;
// then the key is released (and its release notified), so that waiters of
// other Lockers get their chance.
const MaxLocalHandoffs = 8

// The local gate serializes, per key, the Acquire calls of one Locker: the
// first caller goes to the database, the others queue in process (in
// arrival order) and get their turn when the caller before them has
// released its lease (or it ended), or gave up. So only one attempt per key
// and Locker is in flight, and a release wakes one attempt per Locker, not
// a herd. When the holder releases while a local caller waits, the lock is
// handed over directly (handoff.sql: one UPDATE instead of a DELETE, a
// notification and an INSERT). TryAcquire, and Acquire with a caller-chosen
// Handle (a possible re-send of a grant that holds the gate), bypass it.

type gate struct {
	holder   *lock.Lease // the gated lease holding the turn; nil while attempting
	handoffs int         // consecutive handoffs
	queue    []*turn
}

// turn is a queued caller. ch receives nil (go to the database) or a handed
// lease, exactly once, after the turn left the queue.
type turn struct {
	opts lock.AcquireOptions
	ch   chan *lock.Lease
	prev *lock.Lease // the gate's holder when the turn was taken for a handoff
}

// enter waits for key's turn. It returns a lease when one was handed over,
// nil when the caller must acquire from the database; then it must call
// exit or hold(lease) once.
func (l *Locker) enter(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	l.mu.Lock()
	g := l.gates[key]
	if g == nil {
		l.gates[key] = &gate{}
		l.mu.Unlock()
		return nil, nil
	}
	t := &turn{opts: opts, ch: make(chan *lock.Lease, 1)}
	g.queue = append(g.queue, t)
	l.mu.Unlock()
	select {
	case lease := <-t.ch:
		return lease, nil
	case <-ctx.Done():
	case <-l.ctx.Done():
	}
	err := l.gaveUp(ctx, key)
	l.mu.Lock()
	for i, x := range g.queue {
		if x == t {
			g.queue = append(g.queue[:i:i], g.queue[i+1:]...)
			l.mu.Unlock()
			return nil, err
		}
	}
	l.mu.Unlock()
	// Our turn came as we gave up: pass it on, or free the handed lease.
	if lease := <-t.ch; lease != nil {
		l.releaseQuietly(lease)
	} else {
		l.exit(key)
	}
	return nil, err
}

// exit passes key's turn to the next waiter (which goes to the database).
func (l *Locker) exit(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exitLocked(key)
}

func (l *Locker) exitLocked(key string) {
	g := l.gates[key]
	if g == nil {
		return
	}
	g.holder = nil
	if len(g.queue) == 0 {
		delete(l.gates, key)
		return
	}
	g.queue[0].ch <- nil
	g.queue = g.queue[1:]
}

// hold records that lease holds key's turn, and passes the turn on when the
// lease ends (released, expired or lost) unless it was handed over first.
func (l *Locker) hold(lease *lock.Lease, handed bool) {
	l.mu.Lock()
	if g := l.gates[lease.Key]; g != nil {
		g.holder = lease
		if !handed {
			g.handoffs = 0
		}
	}
	l.mu.Unlock()
	go func() {
		<-lease.Done()
		l.leave(lease)
	}()
}

// leave passes the turn on if lease still holds it.
func (l *Locker) leave(lease *lock.Lease) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if g := l.gates[lease.Key]; g != nil && g.holder == lease {
		l.exitLocked(lease.Key)
	}
}

// takeHandoff returns the next local waiter of lease's key if the lease
// should be handed to it, removing it from the queue.
func (l *Locker) takeHandoff(lease *lock.Lease) *turn {
	l.mu.Lock()
	defer l.mu.Unlock()
	g := l.gates[lease.Key]
	if g == nil || g.holder == nil || g.holder.Handle != lease.Handle || len(g.queue) == 0 || g.handoffs >= MaxLocalHandoffs {
		return nil
	}
	t := g.queue[0]
	t.prev = g.holder
	g.queue = g.queue[1:]
	g.holder = nil // in transition: the old lease's end no longer passes the turn
	g.handoffs++
	return t
}

// endHolder ends the gate's holder when it is the same grant as lease (a
// Lease rebuilt from the grant's fields was released), and passes the turn
// on at once, without waiting for the holder's goroutine.
func (l *Locker) endHolder(lease *lock.Lease, cause error) {
	l.mu.Lock()
	var h *lock.Lease
	if g := l.gates[lease.Key]; g != nil && g.holder != nil && g.holder.Handle == lease.Handle {
		h = g.holder
		l.exitLocked(lease.Key)
	}
	l.mu.Unlock()
	if h != nil && h != lease {
		h.End(cause)
	}
}

// handoff replaces lease by a new grant for t in one statement. On success
// it hands the new lease to t and ends the old one; otherwise t gets the
// turn without a lease and goes to the database.
func (l *Locker) handoff(ctx context.Context, lease *lock.Lease, t *turn) error {
	handle := lock.NewHandle()
	opts := t.opts
	c, cancel := l.detached(ctx)
	defer cancel()
	sent := time.Now()
	var token int64
	err := l.pool.QueryRow(c, l.q.handoff, l.class, lease.Key, lease.Handle, int64(lease.Token),
		opts.Owner, handle, opts.Value, opts.TTL.Microseconds()).Scan(&token)
	switch {
	case err == nil:
		l.stats.handoffs.Add(1)
		next := lock.NewLease(lock.Grant{
			Key: lease.Key, Owner: opts.Owner, Token: lock.Token(token), Handle: handle, Value: opts.Value,
			TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
		})
		l.hold(next, true)
		t.ch <- next
		if t.prev != lease {
			t.prev.End(lock.ErrReleased)
		}
		return lease.Released(true)
	case errors.Is(err, pgx.ErrNoRows):
		// The lease no longer held the key: nothing changed.
		t.ch <- nil
		err := lease.Released(false)
		if t.prev != lease {
			t.prev.End(err)
		}
		return err
	default:
		// If the statement committed, the key is held under a handle
		// nobody will use: abandon it. The old lease is then gone too;
		// if it did not commit, the old lease still holds.
		if outcomeUnknown(err) {
			l.abandon(lease.Key, handle, opts.TTL)
		}
		t.ch <- nil
		return fmt.Errorf("%w (release outcome unknown)", l.fail("release", lease.Key, err))
	}
}
