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

// The primitives beyond the mutex on the same recipe: every contender is a key of
// the lock's directory, ordered by create revision, and what a contender
// may do depends only on the contenders before it (ZooKeeper's shared-lock
// recipe, Curator's InterProcessReadWriteLock and a sequence-numbered
// semaphore):
//
//   - an exclusive contender holds the key when nobody is before it;
//   - a shared one (a read lock, Permits 0) when no exclusive contender is
//     before it, so a waiting writer is not overtaken by later readers;
//   - a semaphore permit (Permits N) when no exclusive contender and fewer
//     than N contenders are before it.
//
// Contenders before a key only ever leave, so a contender that may hold
// stays able to. One order for every mode makes the queue FIFO across
// modes. A shared contender is created only by a Txn that fails if the
// directory changed since it was read, after the read found no shared
// contender with another N (ErrPermitsMismatch): so every shared
// contender of a directory has the same N.
//
// AcquireAll creates its contender on every key in one Txn (one create
// revision on every key: one total order, no cycle of waits), waits until
// it may hold each key, then flags them all granted in one Txn. Until
// flagged, it holds none of them (Inspect and Watch do not count it), but
// those behind it on a key wait for it.
//
// Lock-delay: a key acquired with LockDelay D is put under a lease of its
// own of TTL + D, while the Lease reports TTL. A holder that releases
// deletes its key at once; one that stops renewing has lost the lock at
// its deadline (TTL), but etcd deletes its key, and grants it on, only D
// later.

// features is what zklike offers: every primitive beyond the mutex.
const features = lock.FeatureShared | lock.FeatureSemaphore | lock.FeatureMultiKey | lock.FeatureWatch | lock.FeatureLockDelay

// Features implements lock.FeatureReporter.
func (l *Locker) Features() lock.Features { return features }

func (l *Locker) checkSupported(opts lock.AcquireOptions) error {
	return kit.CheckSupported("zklike", features, kit.Needs(opts), nil)
}

// delaySeconds rounds a lock-delay up to etcd's whole seconds.
func delaySeconds(d time.Duration) int64 {
	if d <= 0 {
		return 0
	}
	return int64((d + time.Second - 1) / time.Second)
}

// entry is one contender of a directory as read from etcd.
type entry struct {
	kv  *mvccpb.KeyValue
	rec record
}

func entries(kvs []*mvccpb.KeyValue) []entry {
	es := make([]entry, len(kvs))
	for i, kv := range kvs {
		es[i] = entry{kv: kv, rec: decode(kv.Value)}
	}
	return es
}

// eligibility says, for contenders in create-revision order, which may
// hold the key (see above).
func eligibility(es []entry) []bool {
	out := make([]bool, len(es))
	excl, n := false, -1 // an exclusive contender seen; the first shared one's N
	for i, e := range es {
		if !e.rec.Shared {
			out[i] = i == 0
			excl = true
			continue
		}
		out[i] = !excl && (n < 0 || n == e.rec.Permits) && (e.rec.Permits == 0 || i < e.rec.Permits)
		if n < 0 {
			n = e.rec.Permits
		}
	}
	return out
}

// holders says which contenders hold the key: those eligible, and for an
// AcquireAll's contender only once it is flagged granted.
func holders(es []entry) []bool {
	out := eligibility(es)
	for i, e := range es {
		out[i] = out[i] && (!e.rec.Multi || e.rec.Granted)
	}
	return out
}

// index is the position of the contender created at rev, or -1.
func index(es []entry, rev int64) int {
	for i, e := range es {
		if e.kv.CreateRevision == rev {
			return i
		}
	}
	return -1
}

// waitersBehind reports whether a contender after the one created at rev
// waits: may not hold the key (so it waits for the holders).
func waitersBehind(es []entry, rev int64) bool {
	el := eligibility(es)
	for i, e := range es {
		if e.kv.CreateRevision > rev && !el[i] {
			return true
		}
	}
	return false
}

// mismatch is the ErrPermitsMismatch of a shared acquire with permits on
// a directory whose shared contenders have another N; nil otherwise.
func mismatch(key string, es []entry, permits int) error {
	for _, e := range es {
		if e.rec.Shared && e.rec.Permits != permits {
			have := "as a read lock"
			if e.rec.Permits > 0 {
				have = fmt.Sprintf("with %d permits", e.rec.Permits)
			}
			return fmt.Errorf("%w: %q is held %s, not %d", lock.ErrPermitsMismatch, key, have, permits)
		}
	}
	return nil
}

// heldError names the oldest holder of es (or its oldest contender).
func heldError(key string, es []entry) error {
	h := holders(es)
	for i, e := range es {
		if h[i] {
			return &lock.HeldError{Key: key, Owner: e.rec.Owner, Token: lock.Token(e.kv.CreateRevision)}
		}
	}
	if len(es) > 0 {
		return &lock.HeldError{Key: key, Owner: es[0].rec.Owner, Token: lock.Token(es[0].kv.CreateRevision)}
	}
	return &lock.HeldError{Key: key}
}

// dirOp reads a directory's contenders, oldest first.
func dirOp(dir string) clientv3.Op {
	return clientv3.OpGet(dir, clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
}

// unchanged holds while no key of dir was created or modified after rev
// (deletions only remove contenders, which never makes a decision taken at
// rev unsafe).
func unchanged(dir string, rev int64) clientv3.Cmp {
	return clientv3.Compare(clientv3.ModRevision(dir), "<", rev+1).WithPrefix()
}

// readDirs reads the contenders of every directory at one revision.
func (l *Locker) readDirs(ctx context.Context, dirs []string) ([][]entry, int64, error) {
	ops := make([]clientv3.Op, len(dirs))
	for i, d := range dirs {
		ops[i] = dirOp(d)
	}
	var out [][]entry
	var rev int64
	err := l.do(ctx, func(rc context.Context) error {
		resp, err := l.cli.Txn(rc).Then(ops...).Commit()
		if err != nil {
			return err
		}
		out = make([][]entry, len(dirs))
		for i := range dirs {
			out[i] = entries(resp.Responses[i].GetResponseRange().Kvs)
		}
		rev = resp.Header.Revision
		return nil
	})
	return out, rev, err
}

// create puts the contenders cs (one per directory, one lease) in one Txn
// that fails if any of their directories changed since rev; the directory
// reads at rev decided first (rev 0: no read was needed, as for exclusive
// contenders, which conflict with nobody's N). A Txn retried after a lost
// reply finds its own keys. It returns false when a directory changed
// (read again).
func (l *Locker) create(ctx context.Context, cs []*contender, rev int64) (bool, error) {
	var cmps []clientv3.Cmp
	var puts []clientv3.Op
	for _, c := range cs {
		if rev != 0 {
			cmps = append(cmps, unchanged(c.dir, rev))
		}
		cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(c.name), "=", 0))
		puts = append(puts, clientv3.OpPut(c.name, c.value(), clientv3.WithLease(c.lease)))
	}
	var resp *clientv3.TxnResponse
	err := l.do(ctx, func(rc context.Context) (err error) {
		for _, c := range cs {
			c.created = true
		}
		resp, err = l.cli.Txn(rc).If(cmps...).Then(puts...).Else(clientv3.OpGet(cs[0].name)).Commit()
		return err
	})
	if err != nil {
		return false, l.lostSession(cs[0], err)
	}
	if resp.Succeeded {
		for _, c := range cs {
			c.rev = resp.Header.Revision
		}
		return true, nil
	}
	if kvs := resp.Responses[0].GetResponseRange().Kvs; len(kvs) > 0 {
		// An earlier attempt whose reply was lost created them all.
		for _, c := range cs {
			c.rev = kvs[0].CreateRevision
		}
		return true, nil
	}
	for _, c := range cs {
		c.created = false
	}
	return false, nil
}

// queueShared creates a shared contender (after checking its N against
// the directory's) and waits until it may hold the key.
func (l *Locker) queueShared(ctx context.Context, c *contender) (*lock.Lease, error) {
	for {
		dirs, rev, err := l.readDirs(ctx, []string{c.dir})
		if err != nil {
			return nil, err
		}
		if err := mismatch(c.key, dirs[0], c.opts.Permits); err != nil {
			return nil, err
		}
		ok, err := l.create(ctx, []*contender{c}, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			break
		}
	}
	if err := l.waitTurn(ctx, c); err != nil {
		return nil, err
	}
	return l.grant(ctx, c)
}

// tryShared creates a shared contender only if it may hold the key at
// once and nobody waits for it.
func (l *Locker) tryShared(ctx context.Context, c *contender) (*lock.Lease, error) {
	for {
		dirs, rev, err := l.readDirs(ctx, []string{c.dir})
		if err != nil {
			return nil, err
		}
		if err := l.refuseTry(ctx, c, dirs[0]); err != nil {
			return nil, err
		}
		ok, err := l.create(ctx, []*contender{c}, rev)
		if err != nil {
			return nil, err
		}
		if ok {
			c.seenAt = c.rev
			return l.grant(ctx, c)
		}
	}
}

// refuseTry is the error of a TryAcquire of c on a directory of es: a
// permits mismatch, a waiter, or a holder c cannot share the key with.
func (l *Locker) refuseTry(ctx context.Context, c *contender, es []entry) error {
	shared := c.opts.Mode == lock.ModeShared
	if shared {
		if err := mismatch(c.key, es, c.opts.Permits); err != nil {
			return err
		}
	}
	h := holders(es)
	for i := range es {
		if !h[i] {
			return heldError(c.key, es) // someone waits
		}
	}
	if len(es) == 0 {
		return nil
	}
	if !shared {
		return l.delayedOr(ctx, c.key, es[0])
	}
	probe := append(append([]entry(nil), es...), entry{kv: &mvccpb.KeyValue{CreateRevision: 1 << 62}, rec: c.record()})
	if el := eligibility(probe); !el[len(el)-1] {
		return heldError(c.key, es)
	}
	return nil
}

// delayedOr is the error of a TryAcquire that found e holding the key: a
// DelayedError when e's holder is past its TTL and only its lock-delay
// keeps the key (its lease has less than the delay left), else a
// HeldError.
func (l *Locker) delayedOr(ctx context.Context, key string, e entry) error {
	held := &lock.HeldError{Key: key, Owner: e.rec.Owner, Token: lock.Token(e.kv.CreateRevision)}
	if e.rec.Delay == 0 || e.kv.Lease == 0 {
		return held
	}
	now := time.Now()
	rc, cancel := context.WithTimeout(ctx, l.cfg.RequestTimeout)
	ttl, err := l.cli.TimeToLive(rc, clientv3.LeaseID(e.kv.Lease))
	cancel()
	if err != nil || ttl.TTL < 0 || ttl.TTL >= e.rec.Delay {
		return held
	}
	return &lock.DelayedError{Key: key, Until: now.Add(time.Duration(ttl.TTL+1) * time.Second)}
}

// waitTurn blocks until c may hold its key: for an exclusive contender,
// until nobody is before it (the predecessor recipe); for a shared one,
// until no exclusive contender (and, for a semaphore, fewer than N) is
// before it. It sets c.seenAt and c.later for the wanted signal.
func (l *Locker) waitTurn(ctx context.Context, c *contender) error {
	if c.opts.Mode == lock.ModeExclusive {
		mine, pred, rev, err := l.check(ctx, c)
		switch {
		case err != nil:
			return err
		case !mine:
			return errLost
		case pred == nil:
			return nil
		}
		return l.wait(ctx, c, pred, rev)
	}
	lost, stop := l.keepWaiting(c)
	defer stop()
	for {
		var es []entry
		var mine bool
		var rev int64
		err := l.do(ctx, func(rc context.Context) error {
			resp, err := l.cli.Txn(rc).Then(clientv3.OpGet(c.name, clientv3.WithCountOnly()), dirOp(c.dir)).Commit()
			if err != nil {
				return err
			}
			mine = resp.Responses[0].GetResponseRange().Count > 0
			es = entries(resp.Responses[1].GetResponseRange().Kvs)
			rev = resp.Header.Revision
			return nil
		})
		if err != nil {
			return err
		}
		i := index(es, c.rev)
		if !mine || i < 0 {
			return errLost
		}
		if eligibility(es)[i] {
			c.seenAt, c.later = rev, waitersBehind(es, c.rev)
			return nil
		}
		// An exclusive contender before c: wait for the newest of them
		// (the older ones go first). Otherwise, a full semaphore: wait
		// for any contender before c to go.
		var lastExcl string
		for _, e := range es[:i] {
			if !e.rec.Shared {
				lastExcl = string(e.kv.Key)
			}
		}
		if lastExcl != "" {
			err = l.awaitDelete(ctx, lastExcl, rev, lost)
		} else {
			err = l.awaitDeleteBefore(ctx, c, rev, lost)
		}
		if err != nil {
			return err
		}
	}
}

// awaitDeleteBefore returns when a contender older than c may have left
// its directory (a watch of the directory's deletes; see awaitDelete for
// why it starts at the current revision).
func (l *Locker) awaitDeleteBefore(ctx context.Context, c *contender, rev int64, lost <-chan struct{}) error {
	return l.watchDeletes(ctx, c.dir, lost, func(wr clientv3.WatchResponse) (bool, error) {
		if wr.Created {
			// Something may have changed meanwhile: look again.
			return wr.Header.Revision > rev, nil
		}
		for _, ev := range wr.Events {
			if ev.PrevKv == nil || ev.PrevKv.CreateRevision < c.rev {
				return true, nil
			}
		}
		return false, nil
	}, clientv3.WithPrefix(), clientv3.WithCreatedNotify(), clientv3.WithFilterPut(), clientv3.WithPrevKV())
}
