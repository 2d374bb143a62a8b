package gateway

import (
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// tellWanted arranges for the connection to push a "wanted" message when
// the backend tells lease that a caller waits for its key. The push is
// written by a worker: the backend marks leases on its own paths, which
// must not wait for a slow client's socket.
func (c *conn) tellWanted(lease *lock.Lease) {
	if !c.g.wanted {
		return
	}
	lease.AfterWanted(func() {
		c.g.metrics.wantedPushes.Inc()
		c.g.workers.Go(func() {
			c.send(wire.Reply{Type: wire.TypeWanted, Success: true, Key: lease.Key,
				FencingToken: &wire.FencingToken{Key: lease.Key, Value: uint64(lease.Token)},
				LockToken:    lease.Handle})
		})
	})
}

// adopt makes lease, a copy rebuilt from a renew's identity and renewed,
// the connection's entry for it: the copy carries the new deadline and
// TTL, and the holder hears through this connection when the lease is
// wanted. A lease granted on an earlier connection (the client reconnected,
// or followed a new leader) is adopted at its first renewal here, within
// Options.MaxLocksPerConn; past that limit it stays unadopted (still held,
// renewable and releasable, but without wanted pushes).
func (c *conn) adopt(handle string, lease *lock.Lease) {
	c.mu.Lock()
	h := c.leases.get(handle)
	switch {
	case c.ctx.Err() != nil || c.leases == nil:
		c.mu.Unlock()
		return
	case h != nil, c.leases.len()+c.acquiring < c.g.opts.MaxLocksPerConn:
		c.leases.put(lease)
	default:
		c.mu.Unlock()
		return
	}
	c.mu.Unlock()
	lease.AfterEnd(func() { c.dropEnded(lease) })
	c.tellWanted(lease)
}
