package zklike

import (
	"context"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// grant turns c, now the oldest contender, into a Lease. Its deadline
// counts from the send time of the last confirmed grant or keep-alive of
// the key's lease (etcd keeps the lease at least TTL past that). The
// keepers renew every TTL/4 (waiters' own leases) or TTL/3 (sessions); if
// the last renewal is older than TTL/3 the lease is renewed here first, so
// a holder starts with at least two thirds of its TTL.
func (l *Locker) grant(ctx context.Context, c *contender) (*lock.Lease, error) {
	var sent time.Time
	var ttl time.Duration
	if c.sess != nil {
		sent, ttl = c.sess.lastSent(), c.sess.ttl
	} else {
		sent, ttl = c.lastSent()
	}
	if ttl == 0 || time.Since(sent) > ttl/3 {
		// Unknown, or the keeper is behind: renew now, so that the holder
		// gets its TTL and a lost lease is found before the grant.
		var resp *clientv3.LeaseKeepAliveResponse
		err := l.do(ctx, func(rc context.Context) (err error) {
			sent = time.Now()
			resp, err = l.keepAliveOnce(rc, c.lease)
			return err
		})
		switch {
		case leaseNotFound(err):
			return nil, errLost
		case err != nil:
			return nil, err
		}
		ttl = time.Duration(resp.TTL) * time.Second
		if c.sess != nil {
			c.sess.refreshed(sent)
		} else {
			c.refreshed(sent, resp.TTL)
		}
	}
	// A lock-delay lengthened the lease; the holder's TTL is without it.
	ttl -= time.Duration(c.delay) * time.Second
	lease := kit.NewLease(kit.Grant{
		Key: c.key, Owner: c.opts.Owner, Token: lock.Token(c.rev), Handle: c.handle, Value: c.opts.Value,
		TTL: ttl, Sent: sent, DriftFactor: l.cfg.DriftFactor, Mode: c.opts.Mode, Permits: c.opts.Permits,
	})
	if lease.Err() != nil {
		return nil, errLost // over before it began: the lease may be gone
	}
	return lease, nil
}

// hold registers a granted lease for the wanted signal, starts its
// auto-renewal and keeps its session in use until the lease ends.
func (l *Locker) hold(c *contender, lease *lock.Lease) {
	l.wanted.register(lease, c.dir, c.seenAt, c.later)
	switch {
	case c.opts.AutoRenew:
		go func() {
			lock.KeepAlive(l.ctx, l, lease)
			if c.sess != nil {
				// Not before the lease ends: KeepAlive also returns when
				// the Locker closes, and Close revokes only the sessions
				// nobody uses; a held lock's session must run out at its
				// TTL, after the holder's deadline.
				lease.AfterEnd(c.sess.unuse)
			}
		}()
	case c.sess != nil:
		// No goroutine parked per held lock: callbacks on the lease's end
		// and on the Locker's close, whichever comes first.
		var once sync.Once
		unuse := func() { once.Do(c.sess.unuse) }
		stop := context.AfterFunc(l.ctx, unuse)
		lease.AfterEnd(func() {
			stop()
			unuse()
		})
	}
}

// abandon removes a contender that gave up (cancelled, failed, or a grant
// that raced a cancellation): revoking its own lease deletes its key with
// it; a key under a session lease is deleted. Either way the next
// contender's watch fires at once. If etcd cannot be reached, the cleanup
// is retried in the background (and the lease runs out in any case).
func (l *Locker) abandon(c *contender) {
	if c.sess != nil {
		defer c.sess.unuse()
	}
	if !c.own && !c.created {
		return
	}
	own, id, name := c.own, c.lease, c.name
	granted, rev := c.granted, c.rev
	clean := func(ctx context.Context) error {
		var err error
		if granted && rev != 0 {
			// A holder's key: removed with a release mark (watch.go).
			if _, err = l.deleteMarked(ctx, c.key, name, rev); err != nil || !own {
				return err
			}
		}
		if own {
			_, err = l.cli.Revoke(ctx, id)
			if leaseNotFound(err) {
				err = nil
			}
		} else {
			_, err = l.cli.Delete(ctx, name)
		}
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RequestTimeout)
	err := clean(ctx)
	cancel()
	if err == nil {
		return
	}
	l.cfg.Logger.Warn("zklike: could not remove an abandoned contender; retrying in the background", "key", c.key, "err", err)
	l.life.Go(func() {
		backoff := lock.ExponentialBackoff{Base: 100 * time.Millisecond, Max: 5 * time.Second, Jitter: 1}
		for attempt := 1; ; attempt++ {
			pause, _ := backoff.Backoff(attempt)
			if !sleepCtx(l.ctx, pause) {
				return // closing: an own lease runs out; a session lease too, unrenewed
			}
			ctx, cancel := context.WithTimeout(l.ctx, l.cfg.RequestTimeout)
			err := clean(ctx)
			cancel()
			if err == nil || !transient(err) {
				return
			}
		}
	})
}

// revokeLater revokes a lease in the background (best effort: it runs out
// at its TTL anyway).
func (l *Locker) revokeLater(id clientv3.LeaseID) {
	l.life.Go(func() {
		ctx, cancel := context.WithTimeout(context.Background(), l.cfg.RequestTimeout)
		defer cancel()
		l.cli.Revoke(ctx, id)
	})
}
