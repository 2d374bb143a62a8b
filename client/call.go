package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// call is one logical request, sent once per connection attempt (each copy
// with a fresh id) until it is answered.
type call struct {
	op        string // "acquire", "release", …: with req.Key, what the call's errors name (see what)
	req       wire.Request
	wait      bool // a waiting acquire: its wait is cancelled on the gateway when ctx or the client ends
	grantable bool // the answer may be a grant, which must be released if nobody takes it

	// onSend, if set, runs just before each copy is written.
	onSend func(now time.Time)

	sends int       // copies written (or attempted)
	first time.Time // when the first copy was sent
	last  time.Time // when the answered copy was sent
	// prior reports whether an earlier copy than the answered one may have
	// taken effect: its write failed, its connection failed before the
	// answer, or it was answered unavailable (outcome unknown). Copies
	// answered not_leader, closed or cancelled did nothing.
	prior bool
}

// what names the call in errors and logs, e.g. `acquire "orders/42"`. It
// is built only when needed: formatting it on every call costs more than the
// rest of the client's bookkeeping.
func (k *call) what() string {
	if k.req.Key == "" && k.req.Keys != nil {
		return fmt.Sprintf("%s %q", k.op, k.req.Keys)
	}
	return fmt.Sprintf("%s %q", k.op, k.req.Key)
}

// do sends k on the live connection and returns the first answer that is
// not a transient failure. Dropped connections, not_leader redirects,
// closed gateways and unavailable answers are retried (redirects at once,
// the rest with backoff) until ctx ends; maxStrikes not_leader answers
// naming no leader or unavailable answers in a row move the connection to
// another endpoint. parent is the caller's context
// (ctx may add RequestTimeout to it); the error of a call that gave up says
// which of them ended.
func (c *Client) do(parent, ctx context.Context, k *call) (*reply, error) {
	var (
		last  error // the last transient failure
		hops  int
		retry int
	)
	for {
		if ctx.Err() != nil {
			return nil, c.gaveUp(parent, ctx, k.what(), c.orDialErr(last))
		}
		wc, err := c.conn(ctx)
		if err != nil {
			return nil, c.gaveUp(parent, ctx, k.what(), c.orDialErr(last))
		}
		id := c.newID()
		ch, ok := wc.register(id)
		if !ok {
			<-wc.done // it just failed (done closes right after); conn waits for the next one
			continue
		}
		now := time.Now()
		if k.sends == 0 {
			k.first = now
		}
		k.sends++
		k.last = now
		k.req.ID = id
		k.req.Traceparent = "" // a re-send may go to a gateway that does not read it
		if wc.traceparent {
			k.req.Traceparent = c.traceparent(ctx)
		}
		if k.onSend != nil {
			k.onSend(now)
		}
		if err := wc.send(&k.req); err != nil {
			wc.unregister(id)
			last = fmt.Errorf("%w: %v", errDropped, err)
			k.prior = true // part of the frame may have gone out
			continue
		}
		r, err := c.await(parent, ctx, wc, id, ch, k)
		if err != nil {
			return nil, err
		}
		if r == nil {
			last = errDropped
			k.prior = true
			c.log.Debug("lockgate client: re-sending after a dropped connection", "what", k.what(), "addr", wc.addr)
			continue
		}
		switch code := r.code(); code {
		case wire.CodeNotLeader:
			lid, addr := leaderOf(r.Error)
			last = &lock.NotLeaderError{LeaderID: lid, LeaderAddr: addr}
			if addr != "" && c.dead(addr) {
				addr = "" // named leader just failed to answer a dial: as if unknown
			}
			if addr != "" {
				if hops < c.opts.MaxHops {
					hops++
					if addr != wc.addr {
						// Every request on this connection would be
						// redirected too: move the connection.
						c.log.Debug("lockgate client: redirected to the leader", "from", wc.addr, "to", addr, "hop", hops)
						wc.closeFor(addr, false, last)
						continue
					}
					// The named leader is this node, not ready yet.
				} else if !k.wait {
					return nil, last
				} else {
					hops = 0 // a waiting acquire keeps looking, after a pause
				}
			} else {
				// This node knows no leader: an election, or a leader cut
				// off from its quorum that stepped down, which may last.
				// Nothing was done (k.prior stays); like unavailable, a few
				// in a row move the client to another endpoint.
				wc.strike()
			}
			retry++
			if !c.backoff(ctx, retry) {
				return nil, c.gaveUp(parent, ctx, k.what(), last)
			}
		case wire.CodeClosed:
			last = replyError(r, k.req.Key)
			wc.closeFor("", true, last)
		case wire.CodeUnavailable, wire.CodeTooManyWaiters:
			last = replyError(r, k.req.Key)
			if code == wire.CodeUnavailable {
				k.prior = true // "outcome unknown for writes"
				wc.strike()    // a gateway that cannot reach its backend: try another
			}
			retry++
			if !c.backoff(ctx, retry) {
				return nil, c.gaveUp(parent, ctx, k.what(), last)
			}
		case wire.CodeCancelled:
			if !k.wait {
				return r, nil
			}
			// Nobody asked for it (we cancel only when giving up): the
			// gateway dropped the wait. Queue again.
			last = replyError(r, k.req.Key)
			retry++
			if !c.backoff(ctx, retry) {
				return nil, c.gaveUp(parent, ctx, k.what(), last)
			}
		default:
			wc.good()
			return r, nil
		}
	}
}

// backoff sleeps before retry number n; false if ctx or the client ended.
func (c *Client) backoff(ctx context.Context, n int) bool {
	d, ok := c.opts.Backoff.Backoff(n)
	if !ok {
		d, _ = DefaultBackoff().Backoff(n)
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	case <-c.ctx.Done():
		return false
	}
}

// await waits for the answer to the copy of k sent on wc as id: nil, nil
// when the connection failed first. When ctx ends (or, for a waiting
// acquire, the client closes) it gives the request up: see abandon.
func (c *Client) await(parent, ctx context.Context, wc *wsConn, id string, ch chan *reply, k *call) (*reply, error) {
	var closing <-chan struct{}
	if k.wait {
		closing = c.ctx.Done()
	}
	for {
		select {
		case r := <-ch:
			if r.Type == "queued" {
				wc.good()
				continue
			}
			wc.unregister(id)
			return r, nil
		case <-wc.done:
			// The reader may have queued the answer just before it stopped.
			for {
				select {
				case r := <-ch:
					if r.Type != "queued" {
						return r, nil
					}
					continue
				default:
				}
				return nil, nil
			}
		case <-ctx.Done():
			c.abandon(wc, id, ch, k)
			return nil, c.gaveUp(parent, ctx, k.what(), nil)
		case <-closing:
			c.abandon(wc, id, ch, k)
			return nil, fmt.Errorf("lockgate client: %s: %w", k.what(), lock.ErrClosed)
		}
	}
}

// abandon gives up the copy of k sent on wc as id. A waiting acquire is
// cancelled on the gateway (command 6) and its final answer awaited: a grant
// that raced with the cancel is released, so the caller is never left
// holding a lock it did not get. A try-acquire's answer is awaited in the
// background for the same reason. Other requests are just forgotten.
func (c *Client) abandon(wc *wsConn, id string, ch chan *reply, k *call) {
	if !k.grantable {
		wc.unregister(id)
		return
	}
	settle := func() {
		defer wc.unregister(id)
		t := time.NewTimer(c.opts.RequestTimeout)
		defer t.Stop()
		for {
			select {
			case r := <-ch:
				if r.Type == "queued" {
					continue
				}
				c.releaseGranted(wc, r)
				return
			case <-wc.done:
				select {
				case r := <-ch:
					c.releaseGranted(wc, r)
				default:
					c.log.Warn("lockgate client: connection lost while giving up an acquire; a grant that raced in stays held until its TTL", "key", k.req.Key)
				}
				return
			case <-t.C:
				c.log.Warn("lockgate client: no answer to a cancelled acquire; closing the connection so that the gateway drops the wait", "key", k.req.Key)
				wc.closeFor("", false, errors.New("cancelled acquire never answered"))
				return
			}
		}
	}
	if !k.wait {
		go settle()
		return
	}
	if err := wc.send(&wire.Request{ID: c.newID(), CommandType: wire.CmdCancel, Target: id}); err != nil {
		c.log.Warn("lockgate client: could not send the cancel of an acquire", "key", k.req.Key, "err", err)
	}
	settle()
}

// releaseGranted releases what a reply to a given-up acquire granted: a
// grant, or each lease of an acquireAll's grants.
func (c *Client) releaseGranted(wc *wsConn, r *reply) {
	switch r.Type {
	case wire.TypeGrant:
		c.releaseRaced(wc, r)
	case wire.TypeGrants:
		for _, l := range r.Leases {
			c.releaseRaced(wc, &reply{Reply: wire.Reply{Key: l.Key, LockToken: l.LockToken, FencingToken: l.FencingToken}})
		}
	}
}

// releaseRaced releases a grant that arrived for a request its caller gave
// up, first on the connection it came on, else through a fresh call.
func (c *Client) releaseRaced(wc *wsConn, r *reply) {
	req := wire.Request{CommandType: wire.CmdRelease, Key: r.Key, LockToken: r.LockToken,
		FencingToken: &wire.FencingToken{Key: r.Key, Value: uint64(r.token())}, Ack: true}
	c.log.Debug("lockgate client: releasing a grant that raced with giving up", "key", r.Key, "token", r.token())
	id := c.newID()
	if wc == nil {
		// No connection to try first (the caller has none at hand).
	} else if ch, ok := wc.register(id); ok {
		req.ID = id
		if wc.send(&req) == nil {
			t := time.NewTimer(c.opts.RequestTimeout)
			defer t.Stop()
			select {
			case a := <-ch:
				wc.unregister(id)
				if a.code() == "" || a.code() == wire.CodeNotHeld {
					return
				}
			case <-wc.done:
			case <-t.C:
			}
		}
		wc.unregister(id)
	}
	if c.ctx.Err() != nil {
		c.log.Warn("lockgate client: could not release a grant that raced with giving up; it stays held until its TTL", "key", r.Key, "token", r.token())
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.opts.RequestTimeout)
	defer cancel()
	k := &call{op: "release", req: req}
	a, err := c.do(ctx, ctx, k)
	if err == nil && (a.code() == "" || a.code() == wire.CodeNotHeld) {
		return
	}
	if err == nil {
		err = replyError(a, r.Key)
	}
	c.log.Warn("lockgate client: could not release a grant that raced with giving up; it stays held until its TTL", "key", r.Key, "token", r.token(), "err", err)
}
