package gateway

import (
	"context"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// leaseFor rebuilds the lease a release or renew names.
func (c *conn) leaseFor(req wire.Request) (*lock.Lease, *apiError) {
	if aerr := leaseRef(req.Key, req.LockToken, req.FencingToken, wsSpelling); aerr != nil {
		return nil, aerr
	}
	ttl := lock.DefaultTTL
	c.mu.Lock()
	if h := c.leases.get(req.LockToken); h != nil {
		ttl = h.TTL()
	}
	c.mu.Unlock()
	return rebuild(req.Key, req.LockToken, req.FencingToken.Value, ttl), nil
}

// heldFor returns the lease this connection was granted that a release
// names (same lock token, key and fencing token), or nil. Releasing that
// Lease rather than a rebuilt copy ends it, so that what the backend keeps
// until a lease ends (its deadline timer, callbacks on its end) goes at
// once, and it spares a copy. The backend checks the lock token and the
// fencing token as it does for a rebuilt copy: finding the lease here
// grants nothing.
func (c *conn) heldFor(req wire.Request) *lock.Lease {
	if req.Key == "" || req.LockToken == "" || req.FencingToken == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	h := c.leases.get(req.LockToken)
	if h == nil || h.Key != req.Key || uint64(h.Token) != req.FencingToken.Value {
		return nil
	}
	return h
}

func (c *conn) release(req wire.Request) {
	lease := c.heldFor(req)
	if lease == nil {
		var aerr *apiError
		if lease, aerr = c.leaseFor(req); aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
	}
	var recv time.Time
	if c.g.tracer != nil {
		recv = time.Now()
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		ctx, span := c.wsSpan(ctx, recv, "release", req)
		err := c.g.tl.Release(ctx, lease)
		c.forget(req.LockToken)
		switch {
		case err != nil:
			c.fail(req.ID, toAPIError(err))
		case req.Ack:
			c.send(wire.Reply{ID: req.ID, Type: wire.TypeReleased, Success: true, Key: req.Key})
		}
		endSpan(span, nil, err)
	})
}

func (c *conn) renew(req wire.Request) {
	lease, rebuilt := c.heldFor(req), false
	if lease == nil || lease.Err() != nil {
		var aerr *apiError
		if lease, aerr = c.leaseFor(req); aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
		rebuilt = true
	}
	ttl := lease.TTL()
	if req.TTL != 0 {
		ttl = ttlOption(req.TTL)
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		if err := c.g.tl.Renew(ctx, lease, ttl); err != nil {
			c.fail(req.ID, toAPIError(err))
			return
		}
		c.g.metrics.leaseRenews.Inc()
		if rebuilt {
			c.adopt(req.LockToken, lease)
		}
		c.send(wire.Reply{ID: req.ID, Type: wire.TypeRenewed, Success: true, Key: req.Key,
			FencingToken: &wire.FencingToken{Key: req.Key, Value: req.FencingToken.Value}, TTL: durationMS(ttl)})
	})
}

func (c *conn) inspect(req wire.Request) {
	if req.Key == "" {
		c.fail(req.ID, newError(wire.CodeInvalidKey, "key is empty"))
		return
	}
	if err := kit.ValidateKey(req.Key); err != nil {
		c.fail(req.ID, toAPIError(err))
		return
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		info, err := c.g.tl.Inspect(ctx, req.Key)
		if err != nil {
			c.fail(req.ID, toAPIError(err))
			return
		}
		c.send(infoReply(req.ID, info))
	})
}

func infoReply(id string, info *lock.LockInfo) wire.Reply {
	r := wire.Reply{ID: id, Type: wire.TypeInfo, Success: true, Key: info.Key, Owner: info.Owner,
		FencingToken: &wire.FencingToken{Key: info.Key, Value: uint64(info.Token)}, Waiters: &info.Waiters,
		Mode: modeName(info.Mode), Permits: info.Permits, Value: wireValue(info.Value), ExpiresIn: expiresIn(info.Expires)}
	for _, h := range info.Holders {
		r.Holders = append(r.Holders, wire.HolderInfo{
			Owner:        h.Owner,
			FencingToken: &wire.FencingToken{Key: info.Key, Value: uint64(h.Token)},
			Value:        wireValue(h.Value),
			ExpiresIn:    expiresIn(h.Expires),
		})
	}
	return r
}

// wireValue is a lock's value in a message: absent (nil) when it has none.
func wireValue(v []byte) *string {
	if v == nil {
		return nil
	}
	s := string(v)
	return &s
}

// expiresIn is the ms left until expires, never negative: absent (nil)
// when expires is zero (no expiry known).
func expiresIn(expires time.Time) *int64 {
	if expires.IsZero() {
		return nil
	}
	ms := max(durationMS(time.Until(expires)), 0)
	return &ms
}

// forget drops a lease from the connection's table.
func (c *conn) forget(handle string) {
	c.mu.Lock()
	c.leases.del(handle)
	delete(c.rod, handle)
	c.mu.Unlock()
}

// dropEnded removes an ended lease from the table, unless the entry has
// moved on to a renewed copy (whose own end removes it).
func (c *conn) dropEnded(lease *lock.Lease) {
	c.mu.Lock()
	if c.leases.get(lease.Handle) == lease {
		c.leases.del(lease.Handle)
		delete(c.rod, lease.Handle)
	}
	c.mu.Unlock()
}

// liveLeases is how many leases the connection holds: ended ones have
// left the table.
func (c *conn) liveLeases() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.leases.len()
}
