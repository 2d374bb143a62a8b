package client

import (
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The gateway pushes "wanted" to the connection that holds a lease when
// another caller waits for its key (docs/protocol.md). The client keeps its
// live leases by lock token so that the push reaches the right Lease.

// track records lease as held by this client until it ends, so that a
// "wanted" push for it marks it (Lease.Wanted). Every grant is tracked, and
// a lease the caller rebuilt is tracked from its first renewal.
func (c *Client) track(lease *lock.Lease) {
	c.hmu.Lock()
	if c.held == nil {
		c.held = map[string]*lock.Lease{}
	}
	if c.held[lease.Handle] == lease {
		c.hmu.Unlock()
		return
	}
	c.held[lease.Handle] = lease
	early := c.early[lease.Handle]
	delete(c.early, lease.Handle)
	c.hmu.Unlock()
	if early {
		kit.MarkWanted(lease)
	}
	lease.AfterEnd(func() {
		c.hmu.Lock()
		if c.held[lease.Handle] == lease {
			delete(c.held, lease.Handle)
		}
		c.hmu.Unlock()
	})
}

// wanted handles a "wanted" push: the lease it names (lock token, key and
// fencing token must all match) is marked wanted. A push for a lease this
// client no longer holds is ignored.
func (c *Client) wanted(r *reply) {
	c.hmu.Lock()
	lease := c.held[r.LockToken]
	if _, ok := c.early[r.LockToken]; ok && lease == nil {
		c.early[r.LockToken] = true
	}
	c.hmu.Unlock()
	if lease == nil || lease.Key != r.Key || r.FencingToken == nil || lease.Token != r.token() {
		return
	}
	kit.MarkWanted(lease)
}

// expect prepares for a grant with lock token handle: a "wanted" push for
// it that overtakes the grant's own processing (the reader hands the grant
// to the acquiring goroutine, which then tracks the lease) is kept until
// track. done forgets it.
func (c *Client) expect(handle string) (done func()) {
	c.hmu.Lock()
	if c.early == nil {
		c.early = map[string]bool{}
	}
	c.early[handle] = false
	c.hmu.Unlock()
	return func() {
		c.hmu.Lock()
		delete(c.early, handle)
		c.hmu.Unlock()
	}
}

// SignalsWanted implements lock.WantedSignaler: it reports whether the
// gateway the client is (or was last) connected to announced "wanted"
// pushes — raftlock's gateways do, as do gateways over any backend that
// signals it. Before the first connection it reports false.
func (c *Client) SignalsWanted() bool { return c.signalsWanted.Load() }
