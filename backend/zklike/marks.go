package zklike

import (
	"context"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// markLease is a short lease for the release marks: a mark needs to live
// only in the revision of its release, where a watch reads it, so the
// lease is granted for markTTL, never renewed, and replaced once half of it
// has passed.
type markLease struct {
	mu    chan struct{} // a one-slot lock that a context can abandon
	id    clientv3.LeaseID
	until time.Time
}

const markTTL = 60 * time.Second

// markID returns a lease for release marks that lives for a while yet.
func (l *Locker) markID(ctx context.Context, fresh bool) (clientv3.LeaseID, error) {
	m := &l.marks
	select {
	case m.mu <- struct{}{}:
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	defer func() { <-m.mu }()
	if !fresh && m.id != 0 && time.Now().Before(m.until) {
		return m.id, nil
	}
	var resp *clientv3.LeaseGrantResponse
	sent := time.Now()
	err := l.do(ctx, func(rc context.Context) (err error) {
		sent = time.Now()
		resp, err = l.cli.Grant(rc, int64(markTTL/time.Second))
		return err
	})
	if err != nil {
		return 0, err
	}
	m.id, m.until = resp.ID, sent.Add(markTTL/2)
	return m.id, nil
}

// markKey is the key of key's release marks: <prefix>/<escaped key>, next
// to (and outside) its directory, so that one watch range covers both.
func (l *Locker) markKey(key string) string {
	return l.cfg.Prefix + "/" + escapeKey(key)
}

// deleteMarked deletes name, whose create revision must be token, with a
// release mark in the same Txn (the watch tells a release from an expiry
// by it). ok is false when name is not that grant's key.
func (l *Locker) deleteMarked(ctx context.Context, key, name string, token int64) (resp *clientv3.TxnResponse, err error) {
	for attempt := 0; attempt < 2; attempt++ {
		var id clientv3.LeaseID
		if id, err = l.markID(ctx, attempt > 0); err != nil {
			return nil, err
		}
		err = l.do(ctx, func(rc context.Context) (err error) {
			resp, err = l.cli.Txn(rc).If(clientv3.Compare(clientv3.CreateRevision(name), "=", token)).
				Then(
					clientv3.OpPut(l.markKey(key), strconv.FormatInt(token, 10), clientv3.WithLease(id)),
					clientv3.OpDelete(name, clientv3.WithPrevKV()),
				).Commit()
			return err
		})
		if !leaseNotFound(err) {
			return resp, err
		}
	}
	return resp, err
}
