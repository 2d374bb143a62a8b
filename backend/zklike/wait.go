package zklike

import (
	"context"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// wait blocks until c's key is the oldest of its lock, given that at
// revision rev the contender just before it was pred.
func (l *Locker) wait(ctx context.Context, c *contender, pred *mvccpb.KeyValue, rev int64) error {
	lost, stop := l.keepWaiting(c)
	defer stop()
	for pred != nil {
		if err := l.awaitDelete(ctx, string(pred.Key), rev, lost); err != nil {
			return err
		}
		mine, p, r, err := l.check(ctx, c)
		if err != nil {
			return err
		}
		if !mine {
			return errLost
		}
		pred, rev = p, r
	}
	return nil
}

// awaitDelete returns when key (the predecessor) may be gone: its delete
// was seen, or the watch failed and the caller must look again.
//
// The watch starts at etcd's current revision, not at rev: a watch whose
// start revision is not in the future joins etcd's "unsynced" watcher
// group, which the server catches up only every 100 ms
// (syncWatchersLoop); that wait is concurrency.Mutex's ~100 ms handoff.
// A watch from "now" is synced at once and hears the delete as soon as it
// is applied. Its created response carries the revision it starts after;
// if that is later than rev, the delete may have happened in between, so
// the key is read once more.
func (l *Locker) awaitDelete(ctx context.Context, key string, rev int64, lost <-chan struct{}) error {
	return l.watchDeletes(ctx, key, lost, func(wr clientv3.WatchResponse) (bool, error) {
		if wr.Created {
			if wr.Header.Revision > rev {
				gone, err := l.absent(ctx, key)
				if err != nil || gone {
					return true, ctx.Err()
				}
			}
			return false, nil
		}
		for _, ev := range wr.Events {
			if ev.Type == mvccpb.DELETE {
				return true, nil
			}
		}
		return false, nil
	}, clientv3.WithCreatedNotify(), clientv3.WithFilterPut())
}

// watchDeletes is the watch of awaitDelete and awaitDeleteBefore: it
// watches key with opts from etcd's current revision and hands every
// response to seen until seen is done (returning its error). It returns
// errLost when lost closes and ctx.Err() when ctx ends; a watch that ends
// or fails (after a pause rather than spin: no leader on that member, or
// the stream broke) returns ctx.Err() too, and the caller looks again.
func (l *Locker) watchDeletes(ctx context.Context, key string, lost <-chan struct{}, seen func(clientv3.WatchResponse) (bool, error), opts ...clientv3.OpOption) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	wch := l.cli.Watch(wctx, key, opts...)
	for {
		select {
		case <-lost:
			return errLost
		case <-ctx.Done():
			return ctx.Err()
		case wr, ok := <-wch:
			if !ok {
				return ctx.Err() // nil: the watch ended; look again
			}
			if err := wr.Err(); err != nil {
				sleepCtx(ctx, 50*time.Millisecond)
				return ctx.Err()
			}
			if done, err := seen(wr); done {
				return err
			}
		}
	}
}

// absent reports whether key does not exist (a linearizable read).
func (l *Locker) absent(ctx context.Context, key string) (bool, error) {
	var n int64
	err := l.do(ctx, func(rc context.Context) error {
		resp, err := l.cli.Get(rc, key, clientv3.WithCountOnly())
		if err == nil {
			n = resp.Count
		}
		return err
	})
	return n == 0, err
}

// check reads, in one linearizable Txn, whether c's key still exists and
// which contender is now just before it (nil: c holds the lock). The same
// Txn reads the newest contender, so that a grant knows whether another
// caller already waits behind it (c.later, for the wanted signal).
func (l *Locker) check(ctx context.Context, c *contender) (mine bool, pred *mvccpb.KeyValue, rev int64, err error) {
	err = l.do(ctx, func(rc context.Context) error {
		resp, err := l.cli.Txn(rc).Then(
			clientv3.OpGet(c.name, clientv3.WithCountOnly()),
			clientv3.OpGet(c.dir, append(clientv3.WithLastCreate(), clientv3.WithMaxCreateRev(c.rev-1))...),
			clientv3.OpGet(c.dir, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...),
		).Commit()
		if err != nil {
			return err
		}
		mine = resp.Responses[0].GetResponseRange().Count > 0
		pred = nil
		if kvs := resp.Responses[1].GetResponseRange().Kvs; len(kvs) > 0 {
			pred = kvs[0]
		}
		rev = resp.Header.Revision
		newest := resp.Responses[2].GetResponseRange().Kvs
		c.seenAt, c.later = rev, len(newest) > 0 && newest[0].CreateRevision > c.rev
		return nil
	})
	return mine, pred, rev, err
}

// keepWaiting keeps a waiter's own lease alive (every TTL/4) while it
// waits; a session lease has its keeper already. lost closes when the lease is
// found gone.
func (l *Locker) keepWaiting(c *contender) (lost <-chan struct{}, stop func()) {
	if c.sess != nil {
		return c.sess.dead, func() {}
	}
	if !c.own {
		return nil, func() {}
	}
	ch := make(chan struct{})
	ctx, cancel := context.WithCancel(l.ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_, ttl := c.lastSent()
		pause := ttl / 4
		for sleepCtx(ctx, pause) {
			sent := time.Now()
			rc, rcancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
			resp, err := l.keepAliveOnce(rc, c.lease)
			rcancel()
			switch {
			case err == nil:
				c.refreshed(sent, resp.TTL)
				pause = ttl / 4
			case leaseNotFound(err):
				close(ch)
				return
			default:
				pause = min(ttl/4, 250*time.Millisecond)
			}
		}
	}()
	return ch, func() { cancel(); <-done }
}
