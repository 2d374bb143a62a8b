package locktest

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Acquire implements lock.Locker.
func (l *MemLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	leases, err := l.acquire(ctx, []string{key}, opts, true)
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// TryAcquire implements lock.Locker.
func (l *MemLocker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	leases, err := l.acquire(ctx, []string{key}, opts, false)
	if err != nil {
		return nil, err
	}
	return leases[0], nil
}

// AcquireAll implements lock.MultiLocker.
func (l *MemLocker) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	if err := l.checkMulti(keys); err != nil {
		return nil, err
	}
	if l.store.bugs.multiKeyPartialHold {
		return l.oneByOne(ctx, keys, opts, l.Acquire)
	}
	return l.acquire(ctx, keys, opts, true)
}

// TryAcquireAll implements lock.MultiLocker.
func (l *MemLocker) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	if err := l.checkMulti(keys); err != nil {
		return nil, err
	}
	if l.store.bugs.multiKeyPartialHold {
		return l.oneByOne(ctx, keys, opts, l.TryAcquire)
	}
	return l.acquire(ctx, keys, opts, false)
}

func (l *MemLocker) checkMulti(keys []string) error {
	if l.ctx.Err() != nil {
		return lock.ErrClosed
	}
	if err := l.check(lock.FeatureMultiKey); err != nil {
		return err
	}
	return kit.ValidateKeys(keys)
}

// oneByOne is bugs.multiKeyPartialHold: each key in turn, keeping the ones
// it got while it waits for (or fails on) the next.
func (l *MemLocker) oneByOne(ctx context.Context, keys []string, opts lock.AcquireOptions,
	acquire func(context.Context, string, lock.AcquireOptions) (*lock.Lease, error)) ([]*lock.Lease, error) {
	var leases []*lock.Lease
	for _, k := range keys {
		lease, err := acquire(ctx, k, opts)
		if err != nil {
			return nil, err
		}
		leases = append(leases, lease)
	}
	return leases, nil
}

func (l *MemLocker) acquire(ctx context.Context, keys []string, opts lock.AcquireOptions, wait bool) ([]*lock.Lease, error) {
	if l.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	opts, err := kit.Normalize(opts, keys[0], l.clientID)
	if err != nil {
		return nil, err
	}
	if err := l.check(kit.Needs(opts)); err != nil {
		return nil, err
	}
	if l.store.bugs.pretendsShared && !l.store.features.Has(lock.FeatureShared) && opts.Permits == 0 {
		opts.Mode = lock.ModeExclusive // pretends: ignores the mode it does not offer
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := l.store
	now := time.Now()
	s.mu.Lock()
	ks := make([]*memKey, len(keys))
	for i, name := range keys {
		ks[i] = s.keyLocked(name)
		s.expireLocked(ks[i], now)
	}
	for _, k := range ks {
		if err := mismatch(k, opts); err != nil {
			s.scheduleLocked(keys...)
			s.mu.Unlock()
			return nil, err
		}
	}
	if refusal := s.refusalLocked(ks, opts, now); refusal == nil {
		grants := make([]kit.Grant, len(ks))
		for i, k := range ks {
			grants[i] = s.grantLocked(k, opts, now, false)
		}
		s.mu.Unlock()
		return l.leases(grants, opts), nil
	} else if !wait {
		s.scheduleLocked(keys...)
		s.mu.Unlock()
		return nil, refusal
	}
	w := &memWaiter{keys: keys, opts: opts, done: make(chan memResult, 1)}
	var tell []*lock.Lease
	for _, k := range ks {
		if s.bugs.lifoWaiters {
			k.queue = slices.Insert(k.queue, 0, w)
		} else {
			k.queue = append(k.queue, w)
		}
		tell = append(tell, s.wantedLocked(k, opts)...)
	}
	s.scheduleLocked(keys...) // expiries above may have freed keys with waiters
	s.mu.Unlock()
	for _, lease := range tell {
		kit.MarkWanted(lease)
	}

	select {
	case r := <-w.done:
		if r.err != nil {
			return nil, r.err
		}
		return l.leases(r.grants, opts), nil
	case <-ctx.Done():
		return nil, l.withdraw(w, fmt.Errorf("lock: waiting for %q: %w", keys, ctx.Err()))
	case <-l.ctx.Done():
		return nil, l.withdraw(w, lock.ErrClosed)
	}
}

// refusalLocked returns nil when every key of ks can be granted to opts now
// (no waiter ahead, the holders admit it, no lock-delay), else the refusal
// a TryAcquire returns for the first key that cannot.
func (s *MemStore) refusalLocked(ks []*memKey, opts lock.AcquireOptions, now time.Time) error {
	for _, k := range ks {
		bypass := s.bugs.readersBypassWriter && opts.Mode == lock.ModeShared && len(k.holders) > 0
		if (len(k.queue) > 0 && !bypass) || !s.admitsLocked(k, opts) {
			if k.acquires++; s.bugs.grantHeldKey && len(k.holders) > 0 && k.acquires%4 == 0 {
				continue
			}
			e := &lock.HeldError{Key: k.name}
			if len(k.holders) > 0 {
				h := k.holders[0] // read under mu: a renewal moves expires
				e.Owner, e.Token, e.Expires = h.owner, h.token, h.expires
			}
			return e
		}
		if now.Before(k.delayUntil) {
			return &lock.DelayedError{Key: k.name, Until: k.delayUntil}
		}
	}
	return nil
}

// admitsLocked reports whether k's holders admit a new holder with opts
// (whatever waits).
func (s *MemStore) admitsLocked(k *memKey, opts lock.AcquireOptions) bool {
	if len(k.holders) == 0 {
		return true
	}
	first := k.holders[0]
	switch {
	case opts.Mode == lock.ModeExclusive:
		return s.bugs.sharedAdmitsExclusive && first.mode == lock.ModeShared
	case first.mode != lock.ModeShared || first.permits != opts.Permits:
		return false
	case opts.Permits > 0:
		limit := opts.Permits
		if s.bugs.permitsExceeded {
			limit++
		}
		return len(k.holders) < limit
	}
	return true
}

// mismatch returns an error matching lock.ErrPermitsMismatch when opts is a
// shared acquire whose Permits differ from k's shared holders'.
func mismatch(k *memKey, opts lock.AcquireOptions) error {
	if opts.Mode != lock.ModeShared || len(k.holders) == 0 || k.holders[0].mode != lock.ModeShared {
		return nil
	}
	if have := k.holders[0].permits; have != opts.Permits {
		return fmt.Errorf("%w: %q is held with %d permits, asked for %d", lock.ErrPermitsMismatch, k.name, have, opts.Permits)
	}
	return nil
}

// withdraw takes a waiter that gave up out of its queues. If it was granted
// in the meantime, the grants are released so that nobody is left holding
// a lock that its caller will never see (no ghost grants).
func (l *MemLocker) withdraw(w *memWaiter, err error) error {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bugs.grantCancelledWaiter {
		return err
	}
	if s.unqueueLocked(w) {
		s.scheduleLocked(w.keys...) // it may have blocked the waiters behind it
		return err
	}
	r := <-w.done // not queued any more, so it was granted (or refused)
	for _, g := range r.grants {
		k := s.keys[g.Key]
		if i := slices.IndexFunc(k.holders, func(h *memHolder) bool { return h.handle == g.Handle }); i >= 0 {
			s.removeLocked(k, i, lock.EventReleased)
		}
	}
	s.scheduleLocked(w.keys...)
	return err
}

// unqueueLocked removes w from every queue it is in and reports whether it
// was queued.
func (s *MemStore) unqueueLocked(w *memWaiter) bool {
	queued := false
	for _, name := range w.keys {
		k := s.keys[name]
		if i := slices.Index(k.queue, w); i >= 0 {
			k.queue = slices.Delete(k.queue, i, i+1)
			queued = true
		}
	}
	return queued
}

func (l *MemLocker) leases(grants []kit.Grant, opts lock.AcquireOptions) []*lock.Lease {
	out := make([]*lock.Lease, len(grants))
	for i, g := range grants {
		lease := kit.NewLease(g)
		l.store.attach(lease)
		if opts.AutoRenew {
			go lock.KeepAlive(l.ctx, l, lease)
		}
		out[i] = lease
	}
	return out
}
