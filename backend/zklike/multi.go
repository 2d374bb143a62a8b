package zklike

import (
	"context"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// AcquireAll implements lock.MultiLocker (see primitives.go): one Txn queues a
// contender on every key at one create revision; the call waits until it
// may hold every key, then one Txn flags them granted.
func (l *Locker) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return l.acquireAll(ctx, keys, opts, false)
}

// TryAcquireAll implements lock.MultiLocker: one read of every key's
// directory, and one Txn that creates the granted contenders on every key
// only if no directory changed since; a key held or waited for refuses the
// whole call with its HeldError.
func (l *Locker) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return l.acquireAll(ctx, keys, opts, true)
}

func (l *Locker) acquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions, try bool) ([]*lock.Lease, error) {
	if err := kit.ValidateKeys(keys); err != nil {
		return nil, err
	}
	zero := opts.TTL == 0
	var leases []*lock.Lease
	_, err := l.life.Acquire(keys[0], opts, l.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if zero {
			opts.TTL = l.cfg.SessionTTL
		}
		var err error
		leases, err = l.contend(ctx, keys, opts, try, true, func(wctx context.Context, cs []*contender) ([]*lock.Lease, error) {
			return l.multi(wctx, cs, try)
		})
		return nil, err
	})
	return leases, err
}

// enterAll prepares one contender per key, under one lease and handle.
func (l *Locker) enterAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*contender, error) {
	first, err := l.enter(ctx, keys[0], opts)
	if err != nil {
		return nil, err
	}
	first.multi = true
	cs := []*contender{first}
	for _, k := range keys[1:] {
		c := &contender{
			key: k, dir: l.dir(k), opts: opts, delay: first.delay, multi: true,
			lease: first.lease, sess: first.sess, own: first.own, handle: first.handle,
		}
		c.name = c.dir + c.handle
		c.sent, c.ttl = first.lastSent()
		if c.sess != nil && !c.sess.use() {
			// The session died meanwhile: give back what was taken.
			for _, d := range cs {
				d.sess.unuse()
			}
			return nil, errLost
		}
		cs = append(cs, c)
	}
	return cs, nil
}

// multi creates the contenders cs and waits until they may hold every key
// (try: only if they may at once), then flags them granted.
func (l *Locker) multi(ctx context.Context, cs []*contender, try bool) ([]*lock.Lease, error) {
	dirs := make([]string, len(cs))
	for i, c := range cs {
		dirs[i] = c.dir
	}
	// Only a try, or shared contenders (their N), need to read first.
	read := try || cs[0].opts.Mode == lock.ModeShared
	for {
		var es [][]entry
		var rev int64
		var err error
		if read {
			if es, rev, err = l.readDirs(ctx, dirs); err != nil {
				return nil, err
			}
		}
		for i, c := range cs {
			if !read {
				break
			}
			switch {
			case try:
				err = l.refuseTry(ctx, c, es[i])
			case c.opts.Mode == lock.ModeShared:
				err = mismatch(c.key, es[i], c.opts.Permits)
			}
			if err != nil {
				return nil, err
			}
			c.granted = try // a try creates its keys granted
		}
		ok, err := l.create(ctx, cs, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
	}
	if !try {
		for _, c := range cs {
			if err := l.waitTurn(ctx, c); err != nil {
				return nil, err
			}
		}
		if err := l.flagGranted(ctx, cs); err != nil {
			return nil, err
		}
	} else {
		for _, c := range cs {
			c.seenAt = c.rev
		}
	}
	leases := make([]*lock.Lease, 0, len(cs))
	for _, c := range cs {
		lease, err := l.grant(ctx, c)
		if err != nil {
			for _, g := range leases {
				g.End(lock.ErrReleased)
			}
			return nil, err
		}
		leases = append(leases, lease)
		// One lease: its keep-alive is fresh for the other keys too.
		sent, ttl := c.lastSent()
		for _, d := range cs {
			d.refreshed(sent, int64(ttl/time.Second))
		}
	}
	return leases, nil
}

// flagGranted marks every contender of cs granted, if all are still
// there, and reads their directories for the wanted signal.
func (l *Locker) flagGranted(ctx context.Context, cs []*contender) error {
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	for _, c := range cs {
		c.granted = true
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.name), "=", c.rev))
		ops = append(ops, clientv3.OpPut(c.name, c.value(), clientv3.WithIgnoreLease()))
	}
	for _, c := range cs {
		ops = append(ops, dirOp(c.dir))
	}
	var resp *clientv3.TxnResponse
	err := l.do(ctx, func(rc context.Context) (err error) {
		resp, err = l.cli.Txn(rc).If(cmps...).Then(ops...).Commit()
		return err
	})
	if err != nil {
		return err
	}
	if !resp.Succeeded {
		return errLost
	}
	for i, c := range cs {
		es := entries(resp.Responses[len(cs)+i].GetResponseRange().Kvs)
		c.seenAt, c.later = resp.Header.Revision, waitersBehind(es, c.rev)
	}
	return nil
}
