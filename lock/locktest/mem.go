package locktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// MemStore is the in-memory reference implementation of the lock contract:
// the "server" side, shared by every MemLocker made from it. It grants each
// key to one holder at a time, queues waiters per key in FIFO order, expires
// holders at their TTL, and mints tokens from one counter. It exists to prove
// the conformance suite (and to serve as an executable specification); it is
// not a backend that users select.
type MemStore struct {
	mu        sync.Mutex
	keys      map[string]*memKey
	lastToken lock.Token
	bugs      bugs // deliberate defects, set only by the suite's own tests
}

// bugs are the deliberate defects of the broken lockers that prove the suite
// catches what it claims to (see broken_test.go). The zero value is correct.
type bugs struct {
	grantHeldKey         bool // every 4th acquire of a held key is granted anyway
	neverExpire          bool // holders are never freed at their TTL
	reuseTokenOnTakeover bool // taking over an expired key reuses its token
	releaseIgnoresHandle bool // release frees whoever holds the key
	grantCancelledWaiter bool // a waiter whose context ended stays queued
	renewRevivesExpired  bool // renew of a freed key grants it again
	lifoWaiters          bool // newest waiter first
	releaseWakesNobody   bool // a release leaves the queued waiters queued
	neverWanted          bool // holders are never told that a caller waits
	wantedByAny          bool // a caller queueing for any key marks every holder wanted
}

type memKey struct {
	holder   *memHolder // nil when free
	token    lock.Token // the token of the latest grant of this key
	queue    []*memWaiter
	timer    *time.Timer
	acquires int  // counts acquires of a held key, for bugs.grantHeldKey
	expired  bool // the last holder was freed by expiry, for bugs.reuseTokenOnTakeover
}

type memHolder struct {
	owner, handle string
	token         lock.Token
	value         []byte
	expires       time.Time
	lease         *lock.Lease // the holder's Lease, once attached: told when it is wanted
}

type memWaiter struct {
	opts  lock.AcquireOptions
	grant chan lock.Grant // buffered: the granter never blocks
}

// NewMemStore returns an empty store.
func NewMemStore() *MemStore {
	return &MemStore{keys: make(map[string]*memKey)}
}

// NewLocker returns a new client of the store.
func (s *MemStore) NewLocker() *MemLocker {
	ctx, cancel := context.WithCancel(context.Background())
	return &MemLocker{store: s, clientID: "mem-" + lock.NewHandle()[:12], ctx: ctx, cancel: cancel}
}

// SignalsWanted implements lock.WantedSignaler: a holder's lease is marked
// wanted when a caller queues for its key.
func (l *MemLocker) SignalsWanted() bool { return true }

// MemLocker is one client of a MemStore; it implements lock.Locker.
type MemLocker struct {
	store    *MemStore
	clientID string
	ctx      context.Context // ends at Close: stops waits and keep-alives
	cancel   context.CancelFunc
}

var _ lock.Locker = (*MemLocker)(nil)

// Acquire implements lock.Locker.
func (l *MemLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

// TryAcquire implements lock.Locker.
func (l *MemLocker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

func (l *MemLocker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, wait bool) (*lock.Lease, error) {
	if l.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	opts, err := opts.Normalize(key, l.clientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s := l.store
	s.mu.Lock()
	k := s.keyLocked(key)
	s.expireLocked(key, k, time.Now())
	if k.holder != nil {
		k.acquires++
	}
	if k.holder == nil || (s.bugs.grantHeldKey && k.acquires%4 == 0) {
		g := s.grantLocked(key, k, opts)
		s.mu.Unlock()
		return l.lease(g, opts), nil
	}
	if !wait {
		h := k.holder
		// Read under mu: a renewal moves expires.
		err := &lock.HeldError{Key: key, Owner: h.owner, Token: h.token, Expires: h.expires}
		s.mu.Unlock()
		return nil, err
	}
	w := &memWaiter{opts: opts, grant: make(chan lock.Grant, 1)}
	if s.bugs.lifoWaiters {
		k.queue = slices.Insert(k.queue, 0, w)
	} else {
		k.queue = append(k.queue, w)
	}
	tell := s.wantedLocked(k)
	s.mu.Unlock()
	for _, lease := range tell {
		lease.MarkWanted()
	}

	select {
	case g := <-w.grant:
		return l.lease(g, opts), nil
	case <-ctx.Done():
		return nil, l.withdraw(key, w, fmt.Errorf("lock: waiting for %q: %w", key, ctx.Err()))
	case <-l.ctx.Done():
		return nil, l.withdraw(key, w, lock.ErrClosed)
	}
}

// withdraw takes a waiter that gave up out of the queue. If it was granted
// in the meantime, the grant is released so that nobody is left holding a
// lock that its caller will never see (no ghost grants).
func (l *MemLocker) withdraw(key string, w *memWaiter, err error) error {
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.bugs.grantCancelledWaiter {
		return err
	}
	k := s.keys[key]
	if i := slices.Index(k.queue, w); i >= 0 {
		k.queue = slices.Delete(k.queue, i, i+1)
		return err
	}
	g := <-w.grant // not queued any more, so it was granted
	if k.holder != nil && k.holder.handle == g.Handle {
		s.freeLocked(key, k)
	}
	return err
}

func (l *MemLocker) lease(g lock.Grant, opts lock.AcquireOptions) *lock.Lease {
	lease := lock.NewLease(g)
	l.store.attach(lease)
	if opts.AutoRenew {
		go lock.KeepAlive(l.ctx, l, lease)
	}
	return lease
}

// Renew implements lock.Locker.
func (l *MemLocker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if l.ctx.Err() != nil {
		return lock.ErrClosed
	}
	ttl, err := lock.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	s := l.store
	s.mu.Lock()
	k := s.keyLocked(lease.Key)
	s.expireLocked(lease.Key, k, sent)
	h := k.holder
	switch {
	case h == nil && s.bugs.renewRevivesExpired:
		h = &memHolder{owner: lease.Owner, handle: lease.Handle, token: lease.Token, value: lease.Value}
		k.holder = h
	case h == nil || h.handle != lease.Handle || h.token != lease.Token:
		s.mu.Unlock()
		return lease.Renewed(sent, ttl, false)
	}
	h.expires = sent.Add(ttl)
	s.armLocked(lease.Key, k, ttl)
	s.mu.Unlock()
	return lease.Renewed(sent, ttl, true)
}

// Release implements lock.Locker.
func (l *MemLocker) Release(ctx context.Context, lease *lock.Lease) error {
	if l.ctx.Err() != nil {
		return lock.ErrClosed
	}
	if err := lock.ValidateLease(lease); err != nil {
		return err
	}
	s := l.store
	s.mu.Lock()
	k := s.keyLocked(lease.Key)
	s.expireLocked(lease.Key, k, time.Now())
	h := k.holder
	ours := h != nil && h.handle == lease.Handle && h.token == lease.Token
	if h != nil && (ours || s.bugs.releaseIgnoresHandle) {
		s.freeLocked(lease.Key, k)
	}
	s.mu.Unlock()
	return lease.Released(ours)
}

// Inspect implements lock.Locker.
func (l *MemLocker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if l.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := lock.ValidateKey(key); err != nil {
		return nil, err
	}
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keyLocked(key)
	s.expireLocked(key, k, time.Now())
	if k.holder == nil {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	h := k.holder
	return &lock.LockInfo{
		Key: key, Owner: h.owner, Token: h.token, Value: slices.Clone(h.value),
		Expires: h.expires, Waiters: len(k.queue),
	}, nil
}

// Close implements lock.Locker.
func (l *MemLocker) Close() error {
	l.cancel()
	return nil
}

// attach records lease as its key's holder's Lease, to be told when a
// caller waits; a lease granted while callers already wait is told now.
func (s *MemStore) attach(lease *lock.Lease) {
	s.mu.Lock()
	k := s.keyLocked(lease.Key)
	h := k.holder
	if h == nil || h.handle != lease.Handle {
		s.mu.Unlock()
		return
	}
	h.lease = lease
	wanted := len(k.queue) > 0 && !s.bugs.neverWanted
	s.mu.Unlock()
	if wanted {
		lease.MarkWanted()
	}
}

// wantedLocked returns the leases to tell that a caller queued on k (to be
// told once mu is released: MarkWanted runs callbacks).
func (s *MemStore) wantedLocked(k *memKey) []*lock.Lease {
	switch {
	case s.bugs.neverWanted:
		return nil
	case s.bugs.wantedByAny:
		var all []*lock.Lease
		for _, x := range s.keys {
			if x.holder != nil && x.holder.lease != nil {
				all = append(all, x.holder.lease)
			}
		}
		return all
	case k.holder != nil && k.holder.lease != nil:
		return []*lock.Lease{k.holder.lease}
	}
	return nil
}

func (s *MemStore) keyLocked(key string) *memKey {
	k := s.keys[key]
	if k == nil {
		k = &memKey{}
		s.keys[key] = k
	}
	return k
}

// grantLocked makes the caller the holder of key. The grant's Sent is taken
// here, when the TTL starts, so the holder's deadline is conservative.
func (s *MemStore) grantLocked(key string, k *memKey, opts lock.AcquireOptions) lock.Grant {
	now := time.Now()
	s.lastToken++
	token := s.lastToken
	if s.bugs.reuseTokenOnTakeover && k.expired {
		token = k.token
	}
	k.token, k.expired = token, false
	h := &memHolder{owner: opts.Owner, handle: lock.NewHandle(), token: token, value: slices.Clone(opts.Value), expires: now.Add(opts.TTL)}
	k.holder = h
	s.armLocked(key, k, opts.TTL)
	return lock.Grant{Key: key, Owner: h.owner, Token: token, Handle: h.handle, Value: opts.Value, TTL: opts.TTL, Sent: now}
}

// armLocked (re)starts the timer that frees key when its holder's TTL runs
// out, so that waiters are served at expiry without polling.
func (s *MemStore) armLocked(key string, k *memKey, ttl time.Duration) {
	if k.timer != nil {
		k.timer.Stop()
	}
	if s.bugs.neverExpire {
		return
	}
	k.timer = time.AfterFunc(ttl, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.expireLocked(key, k, time.Now())
	})
}

// expireLocked frees key if its holder's TTL has passed.
func (s *MemStore) expireLocked(key string, k *memKey, now time.Time) {
	if k.holder != nil && !s.bugs.neverExpire && !now.Before(k.holder.expires) {
		k.expired = true
		s.freeLocked(key, k)
	}
}

// freeLocked removes the holder and grants the key to the first waiter.
func (s *MemStore) freeLocked(key string, k *memKey) {
	k.holder = nil
	if k.timer != nil {
		k.timer.Stop()
		k.timer = nil
	}
	if len(k.queue) == 0 || s.bugs.releaseWakesNobody {
		if len(k.queue) == 0 {
			k.queue = nil
		}
		return
	}
	w := k.queue[0]
	k.queue = k.queue[1:]
	w.grant <- s.grantLocked(key, k, w.opts)
}
