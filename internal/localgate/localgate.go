// Package localgate serializes, per key, the Acquire calls of one Locker,
// for backends whose waiters would otherwise race each other at the server
// (redlock, sqllock).
//
// The first caller for a key goes to the server; the others queue in
// process, in arrival order, and get their turn when the caller before them
// has released its lease (or the lease ended), or gave up. Only one attempt
// per key and Locker is then in flight, so a release wakes one attempt per
// Locker, not a herd. When the holder releases while a local caller waits,
// the backend may hand the lock over directly (TakeHandoff, then HandOver
// or Decline) — one server operation instead of a release and an acquire —
// at most MaxHandoffs times in a row, after which the key is really
// released so that waiters of other Lockers get their chance.
//
// TryAcquire, and Acquire with a caller-chosen Handle (a possible re-send of
// a grant that holds the gate), must bypass the gate.
package localgate

import (
	"context"
	"sync"

	"github.com/lockgate/lockgate/lock"
)

// Gate is the per-key queue of one Locker. The zero value is not usable;
// call New.
type Gate struct {
	maxHandoffs int

	mu   sync.Mutex
	keys map[string]*state
}

type state struct {
	holder   *lock.Lease // the gated lease holding the turn; nil while attempting
	handoffs int         // consecutive handoffs
	queue    []*Turn
}

// Turn is a queued caller. It receives nil (go to the server) or a handed
// lease, exactly once, after it left the queue.
type Turn struct {
	// Opts are the caller's (normalized) acquire options, for the grant a
	// handoff makes on its behalf.
	Opts lock.AcquireOptions
	ch   chan *lock.Lease
	prev *lock.Lease // the gate's holder when the turn was taken for a handoff
}

// New returns a gate that hands a key over at most maxHandoffs times in a
// row.
func New(maxHandoffs int) *Gate {
	return &Gate{maxHandoffs: maxHandoffs, keys: make(map[string]*state)}
}

// Enter waits for key's turn. It returns a lease when one was handed over,
// nil when the caller must acquire from the server; then it must call Exit
// or Hold(lease) once. When ctx or closed ends first it returns giveUp()'s
// error; a turn that came as the caller gave up is passed on, and a lease
// handed to it is given to release.
func (g *Gate) Enter(ctx context.Context, closed <-chan struct{}, key string, opts lock.AcquireOptions,
	giveUp func() error, release func(*lock.Lease)) (*lock.Lease, error) {
	g.mu.Lock()
	s := g.keys[key]
	if s == nil {
		g.keys[key] = &state{}
		g.mu.Unlock()
		return nil, nil
	}
	t := &Turn{Opts: opts, ch: make(chan *lock.Lease, 1)}
	s.queue = append(s.queue, t)
	g.mu.Unlock()
	select {
	case lease := <-t.ch:
		return lease, nil
	case <-ctx.Done():
	case <-closed:
	}
	err := giveUp()
	g.mu.Lock()
	for i, x := range s.queue {
		if x == t {
			s.queue = append(s.queue[:i:i], s.queue[i+1:]...)
			g.mu.Unlock()
			return nil, err
		}
	}
	g.mu.Unlock()
	// Our turn came as we gave up: pass it on, or free the handed lease.
	if lease := <-t.ch; lease != nil {
		release(lease)
	} else {
		g.Exit(key)
	}
	return nil, err
}

// Queued is how many callers wait in key's queue (for metrics and tests).
func (g *Gate) Queued(key string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	if s := g.keys[key]; s != nil {
		return len(s.queue)
	}
	return 0
}

// Exit passes key's turn to the next waiter, which goes to the server.
func (g *Gate) Exit(key string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.exitLocked(key)
}

func (g *Gate) exitLocked(key string) {
	s := g.keys[key]
	if s == nil {
		return
	}
	s.holder = nil
	if len(s.queue) == 0 {
		delete(g.keys, key)
		return
	}
	s.queue[0].ch <- nil
	s.queue = s.queue[1:]
}

// Hold records that lease holds its key's turn, and passes the turn on when
// the lease ends (released, expired or lost) unless it was handed over
// first. handed says whether the lease came from a handoff (which counts
// towards MaxHandoffs) rather than from the server.
func (g *Gate) Hold(lease *lock.Lease, handed bool) {
	g.mu.Lock()
	if s := g.keys[lease.Key]; s != nil {
		s.holder = lease
		if !handed {
			s.handoffs = 0
		}
	}
	g.mu.Unlock()
	lease.AfterEnd(func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		if s := g.keys[lease.Key]; s != nil && s.holder == lease {
			g.exitLocked(lease.Key)
		}
	})
}

// TakeHandoff returns the next local waiter of lease's key if the lease
// should be handed to it, removing it from the queue; the caller must then
// call HandOver or Decline.
func (g *Gate) TakeHandoff(lease *lock.Lease) *Turn {
	g.mu.Lock()
	defer g.mu.Unlock()
	s := g.keys[lease.Key]
	if s == nil || s.holder == nil || s.holder.Handle != lease.Handle || len(s.queue) == 0 || s.handoffs >= g.maxHandoffs {
		return nil
	}
	t := s.queue[0]
	t.prev = s.holder
	s.queue = s.queue[1:]
	s.holder = nil // in transition: the old lease's end no longer passes the turn
	s.handoffs++
	return t
}

// HandOver gives t the new grant next that replaced lease, and ends the
// gate's previous holder when that was another Lease value of the same
// grant (one rebuilt from its fields).
func (g *Gate) HandOver(t *Turn, lease, next *lock.Lease) {
	g.Hold(next, true)
	t.ch <- next
	if t.prev != lease {
		t.prev.End(lock.ErrReleased)
	}
}

// Decline gives t its turn without a lease (the handoff did not happen):
// it goes to the server. It returns the previous holder, for the caller to
// end if the old grant is gone too.
func (g *Gate) Decline(t *Turn) (prev *lock.Lease) {
	t.ch <- nil
	return t.prev
}

// EndHolder passes the turn on at once when the gate's holder is the same
// grant as lease (which was released, or found not held), without waiting
// for the holder's end, and ends the holder with cause when it is another
// Lease value of that grant (one rebuilt from its fields).
func (g *Gate) EndHolder(lease *lock.Lease, cause error) {
	g.mu.Lock()
	var h *lock.Lease
	if s := g.keys[lease.Key]; s != nil && s.holder != nil && s.holder.Handle == lease.Handle {
		h = s.holder
		g.exitLocked(lease.Key)
	}
	g.mu.Unlock()
	if h != nil && h != lease {
		h.End(cause)
	}
}
