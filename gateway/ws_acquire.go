package gateway

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// reserveLock counts an acquire of n keys against
// Options.MaxLocksPerConn; granted gives the reservation back (or turns it
// into held leases).
func (c *conn) reserveLock(n int) *apiError {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.leases.len()+c.acquiring+n > c.g.opts.MaxLocksPerConn {
		return newError(wire.CodeTooManyLocks,
			fmt.Sprintf("this connection holds or is acquiring %d locks, the maximum (release some first)", c.g.opts.MaxLocksPerConn))
	}
	c.acquiring += n
	return nil
}

func (c *conn) acquire(req wire.Request) {
	opts, aerr := c.g.acquireOptions(wsAcquire(req), c.owner)
	if aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	try := req.CommandType == wire.CmdTryAcquire
	acquire, op := c.g.tl.Acquire, "acquire"
	if try {
		acquire, op = c.g.tl.TryAcquire, "tryAcquire"
	}
	var recv time.Time
	if c.g.tracer != nil {
		recv = time.Now()
	}
	c.launch(req, 1, try, func(ctx context.Context, outcome func(error) error) {
		start := time.Now()
		ctx, span := c.wsSpan(ctx, recv, op, req)
		opts := opts
		var lease *lock.Lease
		err := c.g.sessionAcquire(ctx, req.SessionID, req.Key, &opts)
		if err == nil {
			lease, err = acquire(ctx, req.Key, opts)
		}
		err = outcome(err)
		c.granted(req, start, lease, err)
		endSpan(span, lease, err) // after the grant (or error) was sent
	})
}

// owner is the owner of an acquire or session that names none: the
// connection's client.
func (c *conn) owner() string { return c.clientID }

// launch admits an acquire of n keys for req and runs it on a worker: a
// try (one attempt) once it has a call slot and its locks are reserved,
// under the connection's context; a wait through beginWait, under the
// wait's context. run makes the attempt and reports it, passing its error
// through outcome (endWait's for a wait, as it is for a try).
func (c *conn) launch(req wire.Request, n int, try bool, run func(ctx context.Context, outcome func(error) error)) {
	if try {
		if !c.takeSlot() {
			return
		}
		if aerr := c.reserveLock(n); aerr != nil {
			c.giveSlot()
			c.fail(req.ID, aerr)
			return
		}
		c.g.workers.Go(func() {
			defer c.giveSlot()
			run(c.ctx, func(err error) error { return err })
		})
		return
	}
	ctx, cancel, aerr := c.beginWait(req, n)
	if aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	c.g.workers.Go(func() {
		defer cancel(nil)
		run(ctx, func(err error) error { return c.endWait(req, ctx, err) })
	})
}

// beginWait admits a waiting acquire of n keys (1, or an acquireAll's):
// it checks waitMs and the connection's limits, counts the wait and its
// locks, and makes the wait cancellable by its id. The caller runs the
// wait under ctx, then endWait, and cancel(nil) when done.
func (c *conn) beginWait(req wire.Request, n int) (context.Context, context.CancelCauseFunc, *apiError) {
	if maxMS := durationMS(c.g.opts.MaxWait); req.WaitMS < 0 || req.WaitMS > maxMS {
		return nil, nil, newError(wire.CodeInvalidWait, fmt.Sprintf("waitMs is %d; it must be 0 (no bound) to %d", req.WaitMS, maxMS))
	}
	ctx, cancel := context.WithCancelCause(c.ctx)
	if req.WaitMS > 0 {
		var stop context.CancelFunc
		ctx, stop = context.WithTimeoutCause(ctx, time.Duration(req.WaitMS)*time.Millisecond, errWaitTimedOut)
		cancelCause := cancel
		cancel = func(cause error) { stop(); cancelCause(cause) }
	}
	c.mu.Lock()
	if c.nwaits >= c.g.opts.MaxWaitersPerConn {
		c.mu.Unlock()
		cancel(nil)
		return nil, nil, newError(wire.CodeTooManyWaiters,
			fmt.Sprintf("this connection already waits for %d acquires", c.g.opts.MaxWaitersPerConn))
	}
	if c.leases.len()+c.acquiring+n > c.g.opts.MaxLocksPerConn {
		c.mu.Unlock()
		cancel(nil)
		return nil, nil, newError(wire.CodeTooManyLocks,
			fmt.Sprintf("this connection holds or is acquiring %d locks, the maximum (release some first)", c.g.opts.MaxLocksPerConn))
	}
	c.acquiring += n
	c.nwaits++
	if req.ID != "" {
		key := req.Key
		if key == "" && len(req.Keys) > 0 {
			key = req.Keys[0]
		}
		c.waits[req.ID] = waitRef{key: key, cancel: func() { cancel(errCancelledByClient) }}
	}
	c.mu.Unlock()
	c.g.metrics.waiters.Inc()
	return ctx, cancel, nil
}

// endWait ends the count of a wait begun by beginWait and turns a wait
// that ended by the client's cancel or by waitMs into the error that says
// so.
func (c *conn) endWait(req wire.Request, ctx context.Context, err error) error {
	c.mu.Lock()
	c.nwaits--
	if req.ID != "" {
		delete(c.waits, req.ID)
	}
	c.mu.Unlock()
	c.g.metrics.waiters.Dec()
	switch cause := context.Cause(ctx); {
	case err == nil:
	case errors.Is(cause, errCancelledByClient):
		err = fmt.Errorf("%w: %w", errCancelledByClient, context.Canceled)
	case errors.Is(cause, errWaitTimedOut):
		what := fmt.Sprintf("%q", req.Key)
		if req.Key == "" {
			what = fmt.Sprintf("%q", req.Keys)
		}
		err = fmt.Errorf("%w: waited %d ms (waitMs) for %s", errWaitTimedOut, req.WaitMS, what)
	}
	return err
}

var errCancelledByClient = errors.New("the client cancelled the wait")

// errWaitTimedOut: an acquire's waitMs ran out (answered timeout).
var errWaitTimedOut = errors.New("the wait timed out")

// waitRef is a waiting acquire of the connection: its key, and how to
// cancel it.
type waitRef struct {
	key    string
	cancel func()
}

// granted reports an acquire's outcome (its reserveLock turns into a held
// lease or ends); a grant that arrives after the connection ended is kept
// (or released, if asked) like any other lease.
func (c *conn) granted(req wire.Request, start time.Time, lease *lock.Lease, err error) {
	if err != nil {
		c.mu.Lock()
		c.acquiring--
		c.mu.Unlock()
		c.fail(req.ID, toAPIError(err))
		return
	}
	c.g.metrics.acquireWS.Observe(time.Since(start).Seconds())
	c.g.metrics.grants.Inc()
	if !c.hold(req, lease) {
		return
	}
	// A lease handed over while others wait says so in its grant: no push
	// could reach the holder before it takes the lease for unwanted.
	wanted := c.g.wanted && lease.IsWanted()
	c.send(wire.Reply{ID: req.ID, Type: wire.TypeGrant, Success: true, Key: lease.Key,
		FencingToken: &wire.FencingToken{Key: lease.Key, Value: uint64(lease.Token)},
		LockToken:    lease.Handle, TTL: durationMS(lease.TTL()), Owner: lease.Owner, Wanted: wanted,
		Mode: modeName(lease.Mode), Permits: lease.Permits, SessionID: sessionIDOf(lease)})
	if !wanted {
		c.tellWanted(lease) // after the grant: a client learns of a lease before it hears it is wanted
	}
}

// hold turns one reserved lock of an acquire into a held lease of the
// connection. It reports false when the connection has ended meanwhile:
// then the lease is kept (or released, if asked) like any other, untold.
func (c *conn) hold(req wire.Request, lease *lock.Lease) bool {
	c.mu.Lock()
	c.acquiring--
	gone := c.ctx.Err() != nil
	if !gone {
		c.leases.put(lease)
		if req.ReleaseOnDisconnect {
			if c.rod == nil {
				c.rod = map[string]struct{}{}
			}
			c.rod[lease.Handle] = struct{}{}
		}
	}
	c.mu.Unlock()
	if gone {
		if req.ReleaseOnDisconnect {
			c.releaseQuietly(lease)
		}
		return false
	}
	// Outside mu: AfterEnd calls dropEnded at once if the lease has ended
	// already.
	lease.AfterEnd(func() { c.dropEnded(lease) })
	return true
}

func (c *conn) cancelWait(req wire.Request) {
	if req.Target == "" {
		c.fail(req.ID, newError(wire.CodeMissingField, "target (the id of the acquire to cancel) is required"))
		return
	}
	c.mu.Lock()
	ref, ok := c.waits[req.Target]
	c.mu.Unlock()
	if !ok {
		c.fail(req.ID, newError(wire.CodeNotFound, fmt.Sprintf("no waiting acquire with id %q", req.Target)))
		return
	}
	// The reply first, then the cancel: the acquire's own answer (error
	// cancelled) comes after it, as the protocol says, however soon the
	// waiting goroutine runs.
	c.send(wire.Reply{ID: req.ID, Type: wire.TypeCancelled, Success: true, Key: ref.key})
	ref.cancel()
}
