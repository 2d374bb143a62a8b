package gateway

import (
	"context"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// tickets are REST acquires that outlived the synchronous window (seed
// 003's hybrid): the wait goes on in the gateway and the client polls.
type tickets struct {
	mu sync.Mutex
	m  map[string]*ticket
}

type ticket struct {
	id     string
	start  time.Time
	cancel context.CancelFunc
	done   chan struct{} // closed when lease/err are set
	lease  *lock.Lease
	err    error
}

// ticketGrace is how long a finished ticket's result waits to be collected;
// an uncollected grant is released then, so it does not hold the lock for
// its whole TTL.
const ticketGrace = time.Minute

func newTickets() *tickets { return &tickets{m: map[string]*ticket{}} }

func (ts *tickets) start(g *Gateway, key string, opts lock.AcquireOptions, wait time.Duration) *ticket {
	ctx, cancel := context.WithTimeout(context.Background(), wait)
	t := &ticket{id: lock.NewHandle(), start: time.Now(), cancel: cancel, done: make(chan struct{})}
	ts.mu.Lock()
	ts.m[t.id] = t
	ts.mu.Unlock()
	g.metrics.waiters.Inc()
	go func() {
		defer cancel()
		t.lease, t.err = g.l.Acquire(ctx, key, opts)
		g.metrics.waiters.Dec()
		close(t.done)
		time.AfterFunc(ticketGrace, func() {
			if ts.collect(t.id) && t.lease != nil {
				rctx, rcancel := context.WithTimeout(context.Background(), opTimeout)
				defer rcancel()
				g.l.Release(rctx, t.lease)
			}
		})
	}()
	return t
}

func (ts *tickets) get(id string) *ticket {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return ts.m[id]
}

// collect removes a ticket; false if it was already gone.
func (ts *tickets) collect(id string) bool {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	_, ok := ts.m[id]
	delete(ts.m, id)
	return ok
}

func (ts *tickets) cancelAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.m {
		t.cancel()
	}
}
