package raftlock

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// Session is one client of a Node: a lock.Locker with its own client id,
// auto-renewals and Close. Lock calls succeed only on the leader; a
// follower answers with a *lock.NotLeaderError naming the leader. The gateway
// opens one per connection; the Node's own Locker methods use a default one.
type Session struct {
	n        *Node
	clientID string
	ctx      context.Context // ends at Close: stops waits and keep-alives
	cancel   context.CancelFunc
}

var _ lock.Locker = (*Session)(nil)

// NewSession returns a new client of n.
func (n *Node) NewSession() *Session {
	ctx, cancel := context.WithCancel(context.Background())
	return &Session{n: n, clientID: "raftlock-" + n.cfg.ID + "-" + lock.NewHandle()[:12], ctx: ctx, cancel: cancel}
}

// Acquire implements lock.Locker: the caller joins the key's FIFO queue on
// the leader and is granted the key when everyone before it is done.
func (s *Session) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return s.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: it fails at once when the key is held
// or others already wait for it.
func (s *Session) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return s.acquire(ctx, key, opts, true)
}

func (s *Session) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	opts, err := opts.Normalize(key, s.clientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	handle := opts.Handle // a client's own handle makes a re-sent acquire idempotent
	if handle == "" {
		handle = lock.NewHandle()
	}
	w := &waiter{key: key, opts: opts, handle: handle, try: try, res: make(chan result, 1)}
	// Checked before it queues: a waiter whose grant the state machine
	// would refuse must not sit at the head of the key's queue.
	if err := s.n.batch.checkOps(acquireOp(w)); err != nil {
		return nil, err
	}
	if err := s.n.sched.enqueue(w); err != nil {
		return nil, err
	}
	select {
	case r := <-w.res:
		if r.err != nil {
			return nil, r.err
		}
		lease := lock.NewLease(*r.grant)
		s.n.sched.attach(lease)
		if opts.AutoRenew {
			go lock.KeepAlive(s.ctx, s, lease)
		}
		return lease, nil
	case <-ctx.Done():
		s.n.sched.abandon(w)
		return nil, fmt.Errorf("raftlock: waiting for %q: %w", key, ctx.Err())
	case <-s.ctx.Done():
		s.n.sched.abandon(w)
		return nil, lock.ErrClosed
	}
}

// Renew implements lock.Locker.
func (s *Session) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if s.ctx.Err() != nil {
		return lock.ErrClosed
	}
	ttl, err := lock.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	res, err := s.n.applyCtx(ctx, fsm.Op{Type: fsm.OpRenew, Key: lease.Key, Handle: lease.Handle, Token: uint64(lease.Token), TTL: ttl})
	if err != nil {
		return err
	}
	if err := lease.Renewed(sent, ttl, res.Results[0].Status == fsm.StatusOK); err != nil {
		return err
	}
	s.n.sched.attach(lease)
	return nil
}

// SignalsWanted implements lock.WantedSignaler: the leader tells a lease
// it handed out (or renewed) when a caller queues for its key.
func (s *Session) SignalsWanted() bool { return true }

// Release implements lock.Locker. When others wait for the key, the release
// and the grant to the next waiter commit in one entry.
func (s *Session) Release(ctx context.Context, lease *lock.Lease) error {
	if s.ctx.Err() != nil {
		return lock.ErrClosed
	}
	if err := lock.ValidateLease(lease); err != nil {
		return err
	}
	// The release may share its entry with the grant to the key's next
	// waiter: it must be valid before it is proposed, or it would fail
	// that grant too.
	op := releaseOp(lease.Key, lease.Handle, uint64(lease.Token))
	if err := s.n.batch.checkOps(op); err != nil {
		return err
	}
	sc := s.n.sched
	done := make(chan applied, 1)
	sc.mu.Lock()
	if !sc.ready {
		sc.mu.Unlock()
		return s.n.notLeader()
	}
	sc.releaseLocked(lease.Key, lease.Handle, uint64(lease.Token), done)
	sc.unlockAndRun(true) // commits the release on this goroutine
	var a applied
	select {
	case a = <-done:
	case <-ctx.Done():
		return fmt.Errorf("raftlock: release %q: outcome unknown: %w", lease.Key, ctx.Err())
	}
	if a.err != nil {
		return a.err
	}
	return lease.Released(a.res.Results[0].Status == fsm.StatusOK)
}

// Inspect implements lock.Locker, linearizably: only the leader answers,
// after confirming with a quorum that it still leads.
func (s *Session) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := lock.ValidateKey(key); err != nil {
		return nil, err
	}
	if err := s.n.verifyLeader(); err != nil {
		return nil, err
	}
	now := s.n.cfg.Clock.Now()
	l, ok := s.n.fsm.Lock(key)
	if !ok || l.Expires <= now {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	sc := s.n.sched
	sc.mu.Lock()
	waiters := 0
	if q := sc.queues[key]; q != nil {
		for _, w := range q.waiters {
			if !w.gone {
				waiters++
			}
		}
	}
	sc.mu.Unlock()
	return &lock.LockInfo{
		Key: key, Owner: l.Owner, Token: lock.Token(l.Token), Value: l.Value,
		Expires: time.Now().Add(time.Duration(l.Expires - now)), Waiters: waiters,
	}, nil
}

// Close implements lock.Locker: waiting calls return lock.ErrClosed and
// auto-renewals stop. The node keeps running.
func (s *Session) Close() error {
	s.cancel()
	return nil
}

// The Node's own lock.Locker methods use its default session; Close shuts
// the node down.

// Acquire implements lock.Locker.
func (n *Node) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return n.session.Acquire(ctx, key, opts)
}

// TryAcquire implements lock.Locker.
func (n *Node) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return n.session.TryAcquire(ctx, key, opts)
}

// Renew implements lock.Locker.
func (n *Node) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return n.session.Renew(ctx, lease, ttl)
}

// Release implements lock.Locker.
func (n *Node) Release(ctx context.Context, lease *lock.Lease) error {
	return n.session.Release(ctx, lease)
}

// Inspect implements lock.Locker.
func (n *Node) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return n.session.Inspect(ctx, key)
}

// SignalsWanted implements lock.WantedSignaler.
func (n *Node) SignalsWanted() bool { return true }

// Close implements lock.Locker by shutting the node down.
func (n *Node) Close() error { return n.Shutdown() }

// ForceRelease frees key whoever holds it (a forced release: an
// operator's tool for a holder known to be dead). The next waiter is granted
// in the same entry. The holder learns of it on its next renewal
// (ErrNotHeld); fencing tokens protect the resource meanwhile. A key nobody
// holds gives lock.ErrNotFound.
func (n *Node) ForceRelease(ctx context.Context, key string) error {
	if err := lock.ValidateKey(key); err != nil {
		return err
	}
	sc := n.sched
	sc.mu.Lock()
	if !sc.ready {
		sc.mu.Unlock()
		return n.notLeader()
	}
	l, ok := n.fsm.Lock(key)
	if !ok {
		sc.mu.Unlock()
		return fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	done := make(chan applied, 1)
	sc.releaseLocked(key, l.Handle, l.Token, done)
	sc.unlockAndRun(true)
	a := <-done
	if a.err != nil {
		return a.err
	}
	if a.res.Results[0].Status != fsm.StatusOK {
		return fmt.Errorf("%w: %q changed hands while being released", lock.ErrNotHeld, key)
	}
	n.log.Warn("lock force-released", "key", key, "owner", l.Owner, "token", l.Token)
	return nil
}
