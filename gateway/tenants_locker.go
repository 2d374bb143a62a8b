package gateway

import (
	"context"
	"errors"
	"time"

	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// record writes the audit line of a request's outcome: every success, and
// the refusals of the policy (forbidden, quota_exceeded); other failures
// (a key held, a lease gone) changed nothing and are not recorded.
func (tl *tenantLocker) record(ctx context.Context, op audit.Op, keys []string, token lock.Token, err error) {
	log := tl.t.g.opts.Audit
	if log == nil {
		return
	}
	result := audit.ResultOK
	if err != nil {
		if !errors.Is(err, lock.ErrForbidden) && !errors.Is(err, lock.ErrQuotaExceeded) {
			return
		}
		result = wire.CodeOf(err)
	}
	c := CallerOf(ctx)
	log.Record(audit.Event{Op: op, Identity: c.Identity, Remote: c.Remote, Keys: keys, FencingToken: uint64(token), Result: result})
}

// tenantLocker is the gateway's Locker as every request calls it: the
// caller's identity (CallerOf its context) is checked against the policy's
// permissions and quotas, recorded with what it creates, and compared with
// the identity of the lease or session it names. Features are the
// backend's (featuresOf(g.l)); the interfaces a feature needs are checked
// before a method of it is called.
type tenantLocker struct {
	l lock.Locker
	t *tenancy
}

// admitAcquire checks an acquire of keys by ctx's caller and reserves its
// leases (and, for a wait, its waiter); done gives the reservations back.
func (tl *tenantLocker) admitAcquire(ctx context.Context, keys []string, opts *lock.AcquireOptions, wait bool) (done func(), err error) {
	id := CallerOf(ctx).Identity
	if err := tl.t.allow(id, PermLock, keys...); err != nil {
		return nil, err
	}
	if opts.Session != nil && !tl.t.ownsSession(id, opts.Session.ID) {
		return nil, notYours("session")
	}
	if err := tl.t.rateOf(ctx); err != nil {
		return nil, err
	}
	freeLeases, err := tl.t.reserve(id, "leases", len(keys))
	if err != nil {
		return nil, err
	}
	done = freeLeases
	if wait {
		freeWaiter, err := tl.t.reserve(id, "waiters", 1)
		if err != nil {
			freeLeases()
			return nil, err
		}
		done = func() { freeWaiter(); freeLeases() }
	}
	opts.Identity = id
	return done, nil
}

func (tl *tenantLocker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, wait bool,
	call func(context.Context, string, lock.AcquireOptions) (*lock.Lease, error)) (*lock.Lease, error) {
	done, err := tl.admitAcquire(ctx, []string{key}, &opts, wait)
	if err != nil {
		tl.record(ctx, audit.OpGrant, []string{key}, 0, err)
		return nil, err
	}
	defer done()
	lease, err := call(ctx, key, opts)
	if err == nil {
		tl.t.granted(opts.Identity, lease)
		tl.record(ctx, audit.OpGrant, []string{key}, lease.Token, nil)
	}
	return lease, err
}

// Acquire implements lock.Locker.
func (tl *tenantLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return tl.acquire(ctx, key, opts, true, tl.l.Acquire)
}

// TryAcquire implements lock.Locker.
func (tl *tenantLocker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return tl.acquire(ctx, key, opts, false, tl.l.TryAcquire)
}

func (tl *tenantLocker) acquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions, wait bool) ([]*lock.Lease, error) {
	done, err := tl.admitAcquire(ctx, keys, &opts, wait)
	if err != nil {
		tl.record(ctx, audit.OpGrant, keys, 0, err)
		return nil, err
	}
	defer done()
	ml := tl.l.(lock.MultiLocker)
	call := ml.TryAcquireAll
	if wait {
		call = ml.AcquireAll
	}
	leases, err := call(ctx, keys, opts)
	if err == nil {
		tl.t.granted(opts.Identity, leases...)
		for _, l := range leases {
			tl.record(ctx, audit.OpGrant, []string{l.Key}, l.Token, nil)
		}
	}
	return leases, err
}

// AcquireAll implements lock.MultiLocker (the backend's, checked by the
// caller).
func (tl *tenantLocker) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return tl.acquireAll(ctx, keys, opts, true)
}

// TryAcquireAll implements lock.MultiLocker.
func (tl *tenantLocker) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return tl.acquireAll(ctx, keys, opts, false)
}

// Release implements lock.Locker: a lease of another identity is
// not_held, as an unknown one.
func (tl *tenantLocker) Release(ctx context.Context, l *lock.Lease) error {
	if !tl.t.ownsLease(CallerOf(ctx).Identity, l.Key, l.Handle) {
		return notYours("lease")
	}
	err := tl.l.Release(ctx, l)
	tl.t.ended(l.Handle)
	tl.record(ctx, audit.OpRelease, []string{l.Key}, l.Token, err)
	return err
}

// Renew implements lock.Locker (never rate-limited). Releases are never
// refused by the policy: giving a key back is always allowed.
func (tl *tenantLocker) Renew(ctx context.Context, l *lock.Lease, ttl time.Duration) error {
	id := CallerOf(ctx).Identity
	if !tl.t.ownsLease(id, l.Key, l.Handle) {
		return notYours("lease")
	}
	if err := tl.t.allow(id, PermLock, l.Key); err != nil {
		return err // the policy no longer lets it hold the key
	}
	err := tl.l.Renew(ctx, l, ttl)
	if err == nil {
		tl.t.renewed(l)
	}
	return err
}

// Inspect implements lock.Locker: read permission, and the rate.
func (tl *tenantLocker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	id := CallerOf(ctx).Identity
	if err := tl.t.allow(id, PermRead, key); err != nil {
		return nil, err
	}
	if err := tl.t.rateOf(ctx); err != nil {
		return nil, err
	}
	return tl.l.Inspect(ctx, key)
}

// Close is never called: the gateway does not close its Locker.
func (tl *tenantLocker) Close() error { return nil }

// OpenSession implements lock.SessionLocker: an identity that may lock
// some key, within its session quota and rate.
func (tl *tenantLocker) OpenSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	s, err := tl.openSession(ctx, opts)
	tl.record(ctx, audit.OpSessionOpen, nil, 0, err)
	return s, err
}

func (tl *tenantLocker) openSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	id := CallerOf(ctx).Identity
	if !tl.t.g.Policy().Reaches(id, PermLock, "") {
		return nil, tl.t.refused(id, "forbidden", forbidden(id, PermLock, nil))
	}
	if err := tl.t.rateOf(ctx); err != nil {
		return nil, err
	}
	done, err := tl.t.reserve(id, "sessions", 1)
	if err != nil {
		return nil, err
	}
	defer done()
	opts.Identity = id
	s, err := tl.l.(lock.SessionLocker).OpenSession(ctx, opts)
	if err == nil {
		tl.t.opened(id, s)
	}
	return s, err
}

// RenewSession implements lock.SessionLocker (never rate-limited): a
// session of another identity is session_expired, as an unknown one.
func (tl *tenantLocker) RenewSession(ctx context.Context, s *lock.Session) error {
	id := CallerOf(ctx).Identity
	if !tl.t.ownsSession(id, s.ID) {
		return notYours("session")
	}
	err := tl.l.(lock.SessionLocker).RenewSession(ctx, s)
	if err == nil {
		tl.t.opened(id, s) // adopts one this gateway did not know
	}
	return err
}

// CloseSession implements lock.SessionLocker.
func (tl *tenantLocker) CloseSession(ctx context.Context, s *lock.Session) error {
	if !tl.t.ownsSession(CallerOf(ctx).Identity, s.ID) {
		return notYours("session")
	}
	err := tl.l.(lock.SessionLocker).CloseSession(ctx, s)
	tl.record(ctx, audit.OpSessionClose, nil, 0, err)
	return err
}

var (
	_ lock.MultiLocker   = (*tenantLocker)(nil)
	_ lock.SessionLocker = (*tenantLocker)(nil)
)
