package zklike

import (
	"context"
	"fmt"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// nameOf is the etcd key of a lease's grant; false when the lease cannot
// be one of ours (then it holds nothing).
func (l *Locker) nameOf(lease *lock.Lease) (string, bool) {
	h := lease.Handle
	if lease.Token == 0 || len(h) < 32 || len(h) > 64 {
		return "", false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return "", false
		}
	}
	return l.dir(lease.Key) + h, true
}

// isHolder compares the grant's key with its create revision: the key of
// this very grant, not a later one of the same name.
func isHolder(name string, token lock.Token) clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(name), "=", int64(token))
}

// Release implements lock.Locker: one Txn deletes the grant's key if its
// create revision is still the lease's token (else ErrNotHeld, changing
// nothing). The next contender's watch fires on that delete. A lease of
// the grant's own is then revoked in the background.
func (l *Locker) Release(ctx context.Context, lease *lock.Lease) error {
	return l.life.Release(lease, func() error { return l.release(ctx, lease) })
}

func (l *Locker) release(ctx context.Context, lease *lock.Lease) error {
	name, ok := l.nameOf(lease)
	if !ok {
		return kit.Released(lease, false)
	}
	resp, err := l.deleteMarked(ctx, lease.Key, name, int64(lease.Token))
	if err != nil {
		return l.fail(ctx, "release", lease.Key, err)
	}
	if !resp.Succeeded {
		return kit.Released(lease, false)
	}
	l.wanted.drop(lease, l.dir(lease.Key))
	if prev := resp.Responses[1].GetResponseDeleteRange().PrevKvs; len(prev) > 0 {
		if kv := prev[0]; kv.Lease != 0 && decode(kv.Value).Own {
			l.revokeLater(clientv3.LeaseID(kv.Lease))
		}
	}
	return kit.Released(lease, true)
}

// Renew implements lock.Locker: it reads the grant's key (ErrNotHeld if it
// is gone or re-created) to learn its lease, and keeps that lease alive
// once. etcd cannot change a lease's TTL: when ttl asks for more than the
// lease has, the key moves to a new lease of ttl (a Put keeps its create
// revision, so the token stays); when it asks for less, the lease keeps
// its longer TTL and the Lease reports that TTL.
func (l *Locker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return l.life.Renew(lease, ttl, func(ttl time.Duration) error { return l.renew(ctx, lease, ttl) })
}

func (l *Locker) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	name, ok := l.nameOf(lease)
	if !ok {
		return kit.Renewed(lease, time.Now(), ttl, false)
	}
	// A Lease object this Locker does not know yet (rebuilt with
	// kit.NewLease, as the gateway does) joins the wanted register from
	// this renewal on. If its grant is there already (another copy, or
	// the Lease that Acquire returned) it joins that entry and reads
	// nothing more; otherwise this renewal's Txn also reads the newest
	// contender, to learn whether someone already waits.
	dir := l.dir(lease.Key)
	fresh := !l.wanted.join(lease, dir)
	ops := []clientv3.Op{clientv3.OpGet(name)}
	switch {
	case fresh && lease.Mode == lock.ModeShared:
		ops = append(ops, dirOp(dir))
	case fresh:
		ops = append(ops, clientv3.OpGet(dir, append(clientv3.WithLastCreate(), clientv3.WithKeysOnly())...))
	}
	var kv *mvccpb.KeyValue
	var seenAt int64
	var later bool
	err := l.do(ctx, func(rc context.Context) error {
		resp, err := l.cli.Txn(rc).If(isHolder(name, lease.Token)).Then(ops...).Commit()
		if err == nil && resp.Succeeded {
			if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
				kv = kvs[0]
			}
			if fresh {
				newest := resp.Responses[1].GetResponseRange().Kvs
				seenAt = resp.Header.Revision
				if lease.Mode == lock.ModeShared {
					later = waitersBehind(entries(newest), int64(lease.Token))
				} else {
					later = len(newest) > 0 && newest[0].CreateRevision > int64(lease.Token)
				}
			}
		}
		return err
	})
	if err != nil {
		return l.fail(ctx, "renew", lease.Key, err)
	}
	if kv == nil || kv.Lease == 0 {
		return kit.Renewed(lease, time.Now(), ttl, false)
	}
	id := clientv3.LeaseID(kv.Lease)
	if delay := decode(kv.Value).Delay; delay > 0 {
		// A grant in its lock-delay (its lease has less than the delay
		// left: the holder's TTL passed) ended by expiry; a keep-alive
		// must not bring it back.
		var left int64 = -1
		err := l.do(ctx, func(rc context.Context) error {
			resp, err := l.cli.TimeToLive(rc, id)
			if err == nil {
				left = resp.TTL
			}
			return err
		})
		if err != nil {
			return l.fail(ctx, "renew", lease.Key, err)
		}
		if left < delay {
			return kit.Renewed(lease, time.Now(), ttl, false)
		}
	}
	var ka *clientv3.LeaseKeepAliveResponse
	var sent time.Time
	err = l.do(ctx, func(rc context.Context) (err error) {
		sent = time.Now()
		ka, err = l.keepAliveOnce(rc, id)
		return err
	})
	switch {
	case leaseNotFound(err):
		return kit.Renewed(lease, sent, ttl, false)
	case err != nil:
		return l.fail(ctx, "renew", lease.Key, err)
	}
	l.sessionRefreshed(id, sent)
	// A lock-delay lengthens the lease by its seconds (primitives.go).
	delay := decode(kv.Value).Delay
	if want := ttlSeconds(ttl); want > ka.TTL-delay {
		err = l.migrate(ctx, lease, name, kv, want+delay)
	} else {
		err = kit.Renewed(lease, sent, time.Duration(ka.TTL-delay)*time.Second, true)
	}
	if err == nil && fresh {
		l.wanted.register(lease, dir, seenAt, later)
	}
	return err
}

// migrate moves a grant's key to a new lease of its own with a longer TTL.
func (l *Locker) migrate(ctx context.Context, lease *lock.Lease, name string, kv *mvccpb.KeyValue, secs int64) error {
	var g *clientv3.LeaseGrantResponse
	var sent time.Time
	err := l.do(ctx, func(rc context.Context) (err error) {
		sent = time.Now()
		g, err = l.cli.Grant(rc, secs)
		return err
	})
	if err != nil {
		return l.fail(ctx, "renew", lease.Key, err)
	}
	old := decode(kv.Value)
	rec := old
	rec.Own = true
	var resp *clientv3.TxnResponse
	err = l.do(ctx, func(rc context.Context) (err error) {
		resp, err = l.cli.Txn(rc).If(isHolder(name, lease.Token)).
			Then(clientv3.OpPut(name, encode(rec), clientv3.WithLease(g.ID))).Commit()
		return err
	})
	if err != nil || !resp.Succeeded {
		l.revokeLater(g.ID)
		if err != nil {
			return l.fail(ctx, "renew", lease.Key, err)
		}
		return kit.Renewed(lease, sent, time.Duration(g.TTL-old.Delay)*time.Second, false)
	}
	if old.Own {
		l.revokeLater(clientv3.LeaseID(kv.Lease))
	}
	return kit.Renewed(lease, sent, time.Duration(g.TTL-old.Delay)*time.Second, true)
}

// sessionRefreshed tells the session with lease id, if it is one of this
// Locker's, that a keep-alive sent at sent succeeded.
func (l *Locker) sessionRefreshed(id clientv3.LeaseID, sent time.Time) {
	l.mu.Lock()
	var s *session
	for _, x := range l.sessions {
		if x.id == id {
			s = x
		}
	}
	l.mu.Unlock()
	if s != nil {
		s.refreshed(sent)
	}
}

// Inspect implements lock.Locker: the oldest contender is the holder; its
// record gives the owner and value, its create revision the token, its
// lease's remaining TTL the expiry, and the other contenders are the
// waiters.
func (l *Locker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return l.life.Inspect(key, func() (*lock.LockInfo, error) { return l.inspect(ctx, key) })
}

func (l *Locker) inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	now := time.Now()
	dirs, _, err := l.readDirs(ctx, []string{l.dir(key)})
	if err != nil {
		return nil, l.fail(ctx, "inspect", key, err)
	}
	es := dirs[0]
	h := holders(es)
	info := &lock.LockInfo{Key: key}
	const gone = -2
	ttls := make(map[int64]int64) // lease → remaining whole seconds, -1 unknown, gone
	for i, e := range es {
		if !h[i] {
			info.Waiters++
			continue
		}
		hi := lock.HolderInfo{Owner: e.rec.Owner, Token: lock.Token(e.kv.CreateRevision), Value: e.rec.Value}
		if id := e.kv.Lease; id != 0 {
			left, ok := ttls[id]
			if !ok {
				left = -1
				rc, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
				ttl, err := l.cli.TimeToLive(rc, clientv3.LeaseID(id))
				cancel()
				switch {
				case err == nil && ttl.TTL >= 0:
					left = ttl.TTL
				case err == nil:
					// TTL -1: the lease is gone (expired or revoked)
					// and etcd has not deleted its key yet.
					left = gone
				}
				ttls[id] = left
			}
			if left == gone {
				continue // held by nobody
			}
			if left >= 0 && left < e.rec.Delay {
				// The holder's TTL has passed: the key is in its
				// lock-delay, held by nobody (etcd deletes it soon).
				continue
			}
			if left >= 0 {
				// The holder's TTL ends a lock-delay before its lease.
				hi.Expires = now.Add(time.Duration(left-e.rec.Delay) * time.Second)
			}
		}
		if len(info.Holders) == 0 {
			info.Owner, info.Token, info.Value, info.Expires = hi.Owner, hi.Token, hi.Value, hi.Expires
			if e.rec.Shared {
				info.Mode, info.Permits = lock.ModeShared, e.rec.Permits
			}
		}
		info.Holders = append(info.Holders, hi)
	}
	if len(info.Holders) == 0 {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	return info, nil
}
