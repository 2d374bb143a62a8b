package client

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The primitives beyond the mutex: the Client passes AcquireOptions.Mode, Permits
// and LockDelay through, acquires several keys at once (AcquireAll) and
// watches keys (Watch, watch.go), whatever the gateway's backend offers;
// the gateway answers unsupported (an error matching lock.ErrUnsupported)
// for what its backend lacks.

var (
	_ lock.FeatureReporter = (*Client)(nil)
	_ lock.MultiLocker     = (*Client)(nil)
	_ lock.Watcher         = (*Client)(nil)
)

// Features implements lock.FeatureReporter: what the gateway the client is
// (or was last) connected to announced in its upgrade's Lockgate-Features
// header. A client that has not connected yet waits for its first
// connection, at most Options.RequestTimeout (so that lock.FeaturesOf on a
// fresh client answers for its gateway), and reports 0 if it could not
// connect by then or is closed. After a failover to a gateway over
// another backend it reports the new gateway's features.
func (c *Client) Features() lock.Features {
	select {
	case <-c.connected:
	default:
		t := time.NewTimer(c.opts.RequestTimeout)
		defer t.Stop()
		select {
		case <-c.connected:
		case <-t.C:
		case <-c.ctx.Done():
		}
	}
	return lock.Features(c.features.Load())
}

// AcquireAll implements lock.MultiLocker: it waits, across reconnects and
// leader changes like Acquire, until every key is granted at once, and
// returns one lease per key in the order of keys (each renewed
// automatically when opts asks for it). When ctx ends first it cancels
// the wait on the gateway and releases a grant that raced in. The leases
// are never kept by the lease cache; an unused cached lease of one of the
// keys is released first.
func (c *Client) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return c.acquireAll(ctx, keys, opts, true)
}

// TryAcquireAll implements lock.MultiLocker: one attempt at every key; a
// held key gives a *lock.HeldError and nothing is held.
func (c *Client) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return c.acquireAll(ctx, keys, opts, false)
}

func (c *Client) acquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions, wait bool) ([]*lock.Lease, error) {
	if !c.enter() {
		return nil, lock.ErrClosed
	}
	defer c.leave()
	if err := kit.ValidateKeys(keys); err != nil {
		return nil, err
	}
	if _, err := kit.Normalize(opts, keys[0], c.opts.ClientID); err != nil {
		return nil, err // before a session is opened for it
	}
	return waitOutRateLimits(c, ctx, wait, func() string { return fmt.Sprintf("acquire-all %q", keys) }, func() ([]*lock.Lease, error) {
		return withOwnSession(c, ctx, opts, func(opts lock.AcquireOptions) ([]*lock.Lease, error) {
			return c.acquireAllIn(ctx, keys, opts, wait)
		})
	})
}

// acquireAllIn is acquireAll with the session, if any, chosen.
func (c *Client) acquireAllIn(ctx context.Context, keys []string, opts lock.AcquireOptions, wait bool) ([]*lock.Lease, error) {
	opts, err := kit.Normalize(opts, keys[0], c.opts.ClientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if c.cache != nil {
		for _, stale := range c.cache.evict(keys) {
			c.releaseQuietly(stale)
		}
	}
	octx, cancel := c.acquireCtx(ctx, wait)
	defer cancel()
	what := fmt.Sprintf("%q", keys)
	handle := opts.Handle
	for {
		if handle == "" {
			handle = lock.NewHandle()
		}
		defer c.expect(handle)()
		k := &call{wait: wait, grantable: true, op: "try-acquire-all",
			req: acquireRequest(wire.Request{CommandType: wire.CmdTryAcquireAll, Keys: keys}, opts, handle)}
		if wait {
			k.req.CommandType = wire.CmdAcquireAll
			k.op = "acquire-all"
		}
		r, err := c.do(ctx, octx, k)
		if err != nil {
			return nil, err
		}
		if r.Type != wire.TypeGrants {
			return nil, unexpected(r, keys[0], wire.TypeGrants)
		}
		if len(r.Leases) != len(keys) {
			c.releaseGranted(nil, r)
			return nil, fmt.Errorf("lockgate client: acquire-all %s: %d leases for %d keys: %w", what, len(r.Leases), len(keys), lock.ErrUnavailable)
		}
		leases := make([]*lock.Lease, 0, len(keys))
		var lost error
		for i, g := range r.Leases {
			if g.Key != keys[i] {
				lost = fmt.Errorf("lockgate client: acquire-all %s: lease %d is for %q, not %q: %w", what, i, g.Key, keys[i], lock.ErrUnavailable)
				break
			}
			lease, err := c.lease(g, keys[i], opts, k.first)
			if err != nil {
				lost = err
				break
			}
			leases = append(leases, lease)
		}
		if lost == nil {
			return leases, nil
		}
		// All or nothing: give back what this grant gave.
		for _, l := range leases {
			c.release(context.Background(), l)
		}
		for _, g := range r.Leases[len(leases):] {
			c.releaseRaced(nil, &reply{Reply: wire.Reply{Key: g.Key, LockToken: g.LockToken, FencingToken: g.FencingToken}})
		}
		if errors.Is(lost, errLostAtOnce) && wait && opts.Handle == "" {
			c.log.Info("lockgate client: a grant of several keys expired on arrival; queueing again", "keys", keys)
			handle = ""
			continue
		}
		return nil, lost
	}
}
