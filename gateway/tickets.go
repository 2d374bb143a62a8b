package gateway

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// tickets are REST acquires that outlived the synchronous window (a
// synchronous call that turns into a polled ticket, so that a plain HTTP
// client can wait longer than its proxies allow a request to last): the
// wait goes on in the gateway and the client polls.
// Each client (Gateway.clientOf) has at most max of them, waiting or
// waiting to be collected: each holds a goroutine and a backend waiter.
type tickets struct {
	max int

	mu       sync.Mutex
	m        map[string]*ticket
	byClient map[string]int // how many of m each client has
}

type ticket struct {
	id     string
	client string
	start  time.Time
	cancel context.CancelFunc
	// closing cancels the wait because the gateway closes: the ticket's
	// answer is then closed (503, retry elsewhere), not cancelled, which
	// only a client's own cancel means (and a cancelled ticket is
	// collected, never answered).
	closing context.CancelCauseFunc
	done    chan struct{} // closed when leases/err are set
	// leases are the grant: one lease, or an acquireAll's (multi), one
	// per key.
	leases []*lock.Lease
	multi  bool
	err    error
}

// releaseAll gives back the ticket's grant (nobody will collect it).
func (t *ticket) releaseAll(g *Gateway) {
	if len(t.leases) == 0 {
		return
	}
	rctx, rcancel := context.WithTimeout(context.Background(), opTimeout)
	defer rcancel()
	if err := lock.ReleaseAll(rctx, g.l, t.leases); err != nil {
		g.log.Info("releasing an uncollected ticket's grant failed", "err", err)
	}
	for _, l := range t.leases {
		g.tenants.ended(l.Handle)
	}
}

// ticketGrace is how long a finished ticket's result waits to be collected;
// an uncollected grant is released then, so it does not hold the lock for
// its whole TTL.
const ticketGrace = time.Minute

func newTickets(max int) *tickets {
	return &tickets{max: max, m: map[string]*ticket{}, byClient: map[string]int{}}
}

// start begins a waiting acquire for client, or reports false when the
// client already has the maximum number of tickets. acquire waits for the
// grant under ctx (lock.Locker's Acquire, or a MultiLocker's AcquireAll:
// multi).
func (ts *tickets) start(g *Gateway, parent context.Context, client string, multi bool, acquire func(ctx context.Context) ([]*lock.Lease, error), wait time.Duration) (*ticket, bool) {
	ts.mu.Lock()
	if ts.byClient[client] >= ts.max {
		ts.mu.Unlock()
		return nil, false
	}
	cctx, closing := context.WithCancelCause(parent)
	ctx, cancel := context.WithTimeoutCause(cctx, wait, errWaitTimedOut)
	t := &ticket{id: lock.NewHandle(), client: client, start: time.Now(), cancel: cancel, closing: closing, done: make(chan struct{}), multi: multi}
	ts.m[t.id] = t
	ts.byClient[client]++
	ts.mu.Unlock()
	g.metrics.waiters.Inc()
	go func() {
		defer cancel()
		defer closing(nil)
		t.leases, t.err = acquire(ctx)
		switch {
		case t.err != nil && context.Cause(cctx) == lock.ErrClosed:
			t.err = fmt.Errorf("gateway: closing, the wait was ended: %w", lock.ErrClosed)
		case t.err != nil && errors.Is(context.Cause(ctx), errWaitTimedOut):
			// The wait ran out, perhaps with the grant's commit still in
			// flight: the backend's error then says "unavailable", but
			// the backend releases a grant that lands after its caller
			// gave up (the lock contract), so the answer is the
			// documented one for a wait that ran out: nothing is held.
			t.err = fmt.Errorf("%w: waited %d ms (wait_ms): %v", errWaitTimedOut, durationMS(wait), t.err)
		}
		g.metrics.waiters.Dec()
		close(t.done)
		time.AfterFunc(ticketGrace, func() {
			if ts.collect(t.id) {
				t.releaseAll(g)
			}
		})
	}()
	return t, true
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
	t, ok := ts.m[id]
	if !ok {
		return false
	}
	delete(ts.m, id)
	if ts.byClient[t.client]--; ts.byClient[t.client] == 0 {
		delete(ts.byClient, t.client)
	}
	return true
}

func (ts *tickets) cancelAll() {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	for _, t := range ts.m {
		t.closing(lock.ErrClosed)
	}
}
