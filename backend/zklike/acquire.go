package zklike

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
)

// errLost: a contender's key or lease vanished while it waited (its lease
// expired: a pause, a partition). The attempt starts over with a new key;
// etcd issue 11456 was a waiter that reported a grant in this state.
var errLost = errors.New("zklike: the contender's key or lease was lost while waiting")

// maxTryRestarts bounds TryAcquire's fresh starts after a lost session.
const maxTryRestarts = 3

// contender is one Acquire or TryAcquire call's place in a key's queue:
// the etcd key <prefix>/<key>/<handle> under a lease.
type contender struct {
	key, dir, name, handle string
	opts                   lock.AcquireOptions

	lease clientv3.LeaseID
	sess  *session // the Locker's session lease the key is under, or nil
	own   bool     // the lease was granted for this contender alone
	// created: the key may exist in etcd (its create was sent), so giving
	// up must delete it.
	created bool
	rev     int64 // the key's create revision: its place and fencing token
	// delay is the lock-delay in whole seconds, added to the lease's TTL
	// (primitives.go); multi marks one of an AcquireAll's keys, granted
	// only once flagged so.
	delay   int64
	multi   bool
	granted bool
	// seenAt is the revision of the last read of the key's directory, and
	// later says whether it saw a contender newer than c's key (someone
	// waits behind it): what the wanted register needs at the grant.
	seenAt int64
	later  bool

	mu   sync.Mutex
	ttl  time.Duration // the lease's TTL as etcd granted it; 0 if unknown
	sent time.Time     // send time of the last confirmed grant or keep-alive of a lease that is not a session's
}

func (c *contender) refreshed(sent time.Time, ttlSecs int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if sent.After(c.sent) {
		c.sent = sent
	}
	if ttlSecs > 0 {
		c.ttl = time.Duration(ttlSecs) * time.Second
	}
}

func (c *contender) lastSent() (time.Time, time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.sent, c.ttl
}

func (c *contender) value() string {
	return encode(c.record())
}

func (c *contender) record() record {
	return record{
		// The keys of an AcquireAll share one lease: releasing one must
		// not revoke it (it runs out at its TTL after the last release).
		Owner: c.opts.Owner, Value: c.opts.Value, Own: c.own && !c.multi,
		Shared: c.opts.Mode == lock.ModeShared, Permits: c.opts.Permits,
		Delay: c.delay, Multi: c.multi, Granted: c.granted,
	}
}

// Acquire implements lock.Locker. The caller's key joins the queue of
// contenders ordered by create revision; if it is not the oldest, the
// caller watches only the key just before its own, and when that one goes
// checks again (the one before may have been a waiter that gave up). FIFO
// across all Lockers.
func (l *Locker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: one Txn that creates the caller's key
// only if the key has no contender at all. Otherwise a *lock.HeldError
// names the oldest contender (the holder) with its owner and token.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

func (l *Locker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	zero := opts.TTL == 0
	return l.life.Acquire(key, opts, l.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if zero {
			opts.TTL = l.cfg.SessionTTL
		}
		return l.acquireNormalized(ctx, key, opts, try)
	})
}

// acquireNormalized is acquire once the options are normalized.
func (l *Locker) acquireNormalized(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	leases, err := l.contend(ctx, []string{key}, opts, try, false, func(wctx context.Context, cs []*contender) ([]*lock.Lease, error) {
		var lease *lock.Lease
		var err error
		switch c, shared := cs[0], opts.Mode == lock.ModeShared; {
		case try && shared:
			lease, err = l.tryShared(wctx, c)
		case try:
			lease, err = l.try(wctx, c)
		case shared:
			lease, err = l.queueShared(wctx, c)
		default:
			lease, err = l.queue(wctx, c)
		}
		if err != nil {
			return nil, err
		}
		return []*lock.Lease{lease}, nil
	})
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// contend is the loop that Acquire and AcquireAll (multi) share: it
// prepares the contenders (enter, or enterAll for multi) and runs attempt
// on them until it grants a lease per key (held then, l.hold), refuses
// (held, within a lock-delay, or ErrPermitsMismatch) or fails; a
// contender that lost its lease while waiting starts afresh (a try at most
// maxTryRestarts times). A grant that raced the end of ctx or of the
// Locker is given back. The options are normalized.
func (l *Locker) contend(ctx context.Context, keys []string, opts lock.AcquireOptions, try, multi bool,
	attempt func(ctx context.Context, cs []*contender) ([]*lock.Lease, error)) ([]*lock.Lease, error) {
	op := "acquire"
	if multi {
		op = "acquire-all"
	}
	if try {
		op = "try-" + op
	}
	if err := l.checkSupported(opts); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, l.fail(ctx, op, keys[0], nil)
	}
	if !try {
		// A waiter of this Locker tells its holders of the keys at once
		// (those it certainly cannot share a key with).
		for _, k := range keys {
			l.wanted.localWaiter(l.dir(k), opts.Mode == lock.ModeExclusive)
		}
	}
	// wctx ends with the caller's ctx or at Close.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(l.ctx, cancel)()
	for restarts := 0; ; restarts++ {
		var cs []*contender
		var err error
		if multi {
			cs, err = l.enterAll(wctx, keys, opts)
		} else {
			var c *contender
			c, err = l.enter(wctx, keys[0], opts)
			cs = []*contender{c}
		}
		if err != nil {
			return nil, l.fail(ctx, op, keys[0], err)
		}
		leases, err := attempt(wctx, cs)
		if err == nil && wctx.Err() != nil {
			// The grant raced the cancellation: never leave it behind.
			for _, lease := range leases {
				lease.End(lock.ErrReleased)
			}
			leases, err = nil, wctx.Err()
			for _, c := range cs {
				c.granted = true // its removal is a release (watch.go)
			}
		}
		if err != nil {
			for _, c := range cs {
				l.abandon(c)
			}
			var held *lock.HeldError
			var delayed *lock.DelayedError
			switch {
			case errors.As(err, &held), errors.As(err, &delayed), errors.Is(err, lock.ErrPermitsMismatch):
				return nil, err
			case errors.Is(err, errLost) && wctx.Err() == nil && (!try || restarts < maxTryRestarts):
				if multi {
					l.cfg.Logger.Warn("zklike: multi-key contender lost its lease while waiting; queueing again", "keys", keys)
				} else {
					l.cfg.Logger.Warn("zklike: contender lost its lease while waiting; queueing again", "key", keys[0], "token", cs[0].rev)
				}
				continue
			}
			return nil, l.fail(ctx, op, keys[0], err)
		}
		for i, c := range cs {
			l.hold(c, leases[i])
		}
		return leases, nil
	}
}

// enter prepares a contender: its lease (the session lease for
// auto-renewed locks, a lease of its own otherwise) and its key name.
func (l *Locker) enter(ctx context.Context, key string, opts lock.AcquireOptions) (*contender, error) {
	c := &contender{key: key, dir: l.dir(key), opts: opts, delay: delaySeconds(opts.LockDelay)}
	secs := ttlSeconds(opts.TTL)
	if opts.AutoRenew && c.delay == 0 {
		s, err := l.session(ctx, secs)
		if err != nil {
			return nil, err
		}
		c.sess, c.lease, c.ttl = s, s.id, s.ttl
	} else {
		var resp *clientv3.LeaseGrantResponse
		var sent time.Time
		err := l.do(ctx, func(rc context.Context) (err error) {
			sent = time.Now()
			resp, err = l.cli.Grant(rc, secs+c.delay)
			return err
		})
		if err != nil {
			return nil, err
		}
		c.lease, c.own = resp.ID, true
		c.refreshed(sent, resp.TTL)
	}
	// The lease id in the name, as in concurrency.Mutex, plus 128 random
	// bits: two calls under one session lease never share a key, and the
	// name's suffix is the lease's handle, the lock token that renew and
	// release present, which must be unguessable (docs/security.md). A
	// name is never reused for a later grant, or its earlier holder would
	// know the later one's token.
	c.handle = opts.Handle
	if c.handle == "" {
		c.handle = fmt.Sprintf("%016x", uint64(c.lease)) + lock.NewHandle()
	}
	c.name = c.dir + c.handle
	return c, nil
}

// try creates c's key only if nobody contends for the lock.
func (l *Locker) try(ctx context.Context, c *contender) (*lock.Lease, error) {
	var resp *clientv3.TxnResponse
	err := l.do(ctx, func(rc context.Context) (err error) {
		c.created = true
		resp, err = l.cli.Txn(rc).
			If(clientv3.Compare(clientv3.CreateRevision(c.dir), "=", 0).WithPrefix()).
			Then(clientv3.OpPut(c.name, c.value(), clientv3.WithLease(c.lease))).
			Else(clientv3.OpGet(c.dir, clientv3.WithFirstCreate()...)).
			Commit()
		return err
	})
	if err != nil {
		return nil, l.lostSession(c, err)
	}
	if resp.Succeeded {
		c.rev = resp.Header.Revision
		c.seenAt = c.rev // the directory was empty: nobody behind
		return l.grant(ctx, c)
	}
	rr := resp.Responses[0].GetResponseRange()
	kvs := rr.Kvs
	if len(kvs) == 0 {
		return nil, fmt.Errorf("zklike: try-acquire %q: contenders seen and gone in one Txn", c.key)
	}
	first := kvs[0]
	if string(first.Key) == c.name {
		// An earlier attempt of this call, whose reply was lost, won.
		c.rev = first.CreateRevision
		c.seenAt, c.later = resp.Header.Revision, rr.Count > 1
		c.adopt(l, first)
		return l.grant(ctx, c)
	}
	c.created = false // the Txn took the Else branch on every attempt
	return nil, l.delayedOr(ctx, c.key, entry{kv: first, rec: decode(first.Value)})
}

// queue creates c's key (or finds it, if an earlier attempt whose reply
// was lost created it: the ZOOKEEPER-1262 lesson), then waits for its turn.
func (l *Locker) queue(ctx context.Context, c *contender) (*lock.Lease, error) {
	var resp *clientv3.TxnResponse
	err := l.do(ctx, func(rc context.Context) (err error) {
		c.created = true
		resp, err = l.cli.Txn(rc).
			If(clientv3.Compare(clientv3.CreateRevision(c.name), "=", 0)).
			Then(
				clientv3.OpPut(c.name, c.value(), clientv3.WithLease(c.lease)),
				// The two newest contenders: the new key and the one
				// before it; Count says whether anyone else is there.
				clientv3.OpGet(c.dir, clientv3.WithPrefix(),
					clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortDescend), clientv3.WithLimit(2))).
			Else(clientv3.OpGet(c.name)).
			Commit()
		return err
	})
	if err != nil {
		return nil, l.lostSession(c, err)
	}
	rev := resp.Header.Revision
	var pred *mvccpb.KeyValue
	if resp.Succeeded {
		c.rev, c.seenAt = rev, rev // the newest key: nobody behind it yet
		rr := resp.Responses[1].GetResponseRange()
		if len(rr.Kvs) > 1 && rr.Count > 1 {
			pred = rr.Kvs[1]
		}
	} else {
		kvs := resp.Responses[0].GetResponseRange().Kvs
		if len(kvs) == 0 {
			return nil, errLost
		}
		c.rev = kvs[0].CreateRevision
		c.adopt(l, kvs[0])
		var mine bool
		if mine, pred, rev, err = l.check(ctx, c); err != nil {
			return nil, err
		}
		if !mine {
			return nil, errLost
		}
	}
	if pred != nil {
		if err := l.wait(ctx, c, pred, rev); err != nil {
			return nil, err
		}
	}
	return l.grant(ctx, c)
}

// lostSession maps a create that failed because the session lease is gone
// to errLost (the session is replaced); other errors pass through.
func (l *Locker) lostSession(c *contender, err error) error {
	if leaseNotFound(err) {
		if c.sess != nil {
			c.sess.die()
			l.forget(c.sess)
		}
		return errLost
	}
	return err
}

// adopt takes over the lease of c's key as found in etcd, when it is not
// the one c brought (a re-sent acquire with the caller's own handle).
func (c *contender) adopt(l *Locker, kv *mvccpb.KeyValue) {
	id := clientv3.LeaseID(kv.Lease)
	if id == c.lease {
		return
	}
	if c.own {
		l.revokeLater(c.lease)
	}
	if c.sess != nil && c.sess.id != id {
		c.sess.unuse()
		c.sess = nil
	}
	rec := decode(kv.Value)
	c.lease, c.own, c.delay = id, rec.Own, rec.Delay
	c.mu.Lock()
	c.ttl, c.sent = 0, time.Time{} // unknown: grant renews it to learn them
	c.mu.Unlock()
}
