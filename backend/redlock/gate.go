package redlock

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// MaxLocalHandoffs bounds how many times in a row a lease is handed from
// one caller to the next waiter of the same Locker without freeing the key
// (see the local gate below); then the key is released, so that waiters of
// other Lockers get their chance.
const MaxLocalHandoffs = 8

// The local gate serializes, per key, the Acquire calls of one Locker: the
// first caller goes to Redis, the others queue in process (in arrival
// order) and get their turn when the caller before them has released its
// lease (or it ended), or gave up. Only one attempt per key and Locker is
// then in flight, so callers of one Locker neither race each other for the
// quorum nor split its votes. When the holder releases while a local
// caller waits, the lock is handed over directly (handoff.lua: one script
// per node instead of a release and an acquire), at most MaxLocalHandoffs
// times in a row. TryAcquire, and Acquire with a caller-chosen Handle (a
// possible re-send of a grant that holds the gate), bypass the gate.

type gateKey struct {
	holder   *lock.Lease // the gated lease holding the turn; nil while attempting
	handoffs int         // consecutive handoffs
	queue    []*turn
}

// turn is a queued caller. ch receives nil (go to Redis) or a handed
// lease, exactly once, after the turn left the queue.
type turn struct {
	opts lock.AcquireOptions
	ch   chan *lock.Lease
	prev *lock.Lease // the gate's holder when the turn was taken for a handoff
}

// enter waits for key's turn. It returns a lease when one was handed over,
// nil when the caller must acquire from Redis; then it must call exit or
// hold(lease) once.
func (l *Locker) enter(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	l.mu.Lock()
	g := l.gates[key]
	if g == nil {
		l.gates[key] = &gateKey{}
		l.mu.Unlock()
		return nil, nil
	}
	t := &turn{opts: opts, ch: make(chan *lock.Lease, 1)}
	g.queue = append(g.queue, t)
	l.mu.Unlock()
	var err error
	select {
	case lease := <-t.ch:
		return lease, nil
	case <-ctx.Done():
		err = fmt.Errorf("redlock: acquire %q: %w", key, ctx.Err())
	case <-l.ctx.Done():
		err = lock.ErrClosed
	}
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

// exit passes key's turn to the next waiter (which goes to Redis).
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
		l.mu.Lock()
		defer l.mu.Unlock()
		if g := l.gates[lease.Key]; g != nil && g.holder == lease {
			l.exitLocked(lease.Key)
		}
	}()
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
// Lease rebuilt from the grant's fields was released): the turn passes on.
func (l *Locker) endHolder(lease *lock.Lease, cause error) {
	l.mu.Lock()
	var h *lock.Lease
	if g := l.gates[lease.Key]; g != nil && g.holder != nil && g.holder != lease && g.holder.Handle == lease.Handle {
		h = g.holder
	}
	l.mu.Unlock()
	if h != nil {
		h.End(cause)
	}
}

// handoff replaces lease by a new grant for t on every node. On success it
// hands the new lease to t and ends the old one; otherwise t gets the turn
// without a lease, and the old lease is released normally.
func (l *Locker) handoff(ctx context.Context, lease *lock.Lease, t *turn) error {
	k := l.keysFor(lease.Key)
	handle := lock.NewHandle()
	opts := t.opts
	n := len(l.nodes)
	replies := make(chan reply, n)
	sent := time.Now()
	for i, nd := range l.nodes {
		l.spawn(func() {
			c, cancel := l.nodeCtx(ctx)
			defer cancel()
			v, err := handoffScript.Run(c, nd.client, []string{k.lock, k.fence, k.meta},
				lease.Handle, uint64(lease.Token), handle, opts.TTL.Milliseconds(), opts.Owner, opts.Value).Slice()
			replies <- reply{node: i, val: v, err: err}
		})
	}
	granted := make([]bool, n)
	answered := make([]bool, n)
	tokens := make([]lock.Token, n)
	ok := 0
	for range l.nodes {
		r := <-replies
		if r.err != nil || len(r.val) < 2 {
			continue
		}
		answered[r.node] = true
		if toInt(r.val[0]) == 1 {
			granted[r.node] = true
			tokens[r.node] = lock.Token(toInt(r.val[1]))
			ok++
		}
	}
	if ok >= l.quorum && time.Since(sent) < opts.TTL-lock.Drift(opts.TTL, l.cfg.DriftFactor) {
		var token lock.Token
		for _, tk := range tokens {
			token = max(token, tk)
		}
		l.propagate(k, handle, token, tokens, answered, nil, 0)
		next := lock.NewLease(lock.Grant{
			Key: lease.Key, Owner: opts.Owner, Token: token, Handle: handle, Value: opts.Value,
			TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
		})
		l.hold(next, true)
		t.ch <- next
		if t.prev != lease {
			t.prev.End(lock.ErrReleased)
		}
		return lease.Released(true)
	}
	// Undo the new grant where it landed (the old one is gone there too),
	// give the waiter its turn, and release the old grant elsewhere.
	var wg sync.WaitGroup
	for i, nd := range l.nodes {
		if !granted[i] {
			continue
		}
		wg.Add(1)
		l.spawn(func() {
			defer wg.Done()
			c, cancel := l.nodeCtx(context.Background())
			defer cancel()
			abortScript.Run(c, nd.client, []string{k.lock, k.meta, l.abortKey(lease.Key, "handoff")}, handle, opts.TTL.Milliseconds(), "0")
		})
	}
	wg.Wait()
	t.ch <- nil
	return l.releaseCounted(ctx, lease, ok)
}
