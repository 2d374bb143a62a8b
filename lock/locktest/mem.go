package locktest

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// MemStore is the in-memory reference implementation of the lock contract:
// the "server" side, shared by every MemLocker made from it. It exists to
// prove the conformance suite and to serve as its executable specification;
// it is not a backend that users select. It offers every optional primitive
// (lock.AllFeatures), and these are the rules every backend follows:
//
//   - A key has one exclusive holder, or any number of shared holders (a
//     read lock, Permits 0), or at most N shared holders (a semaphore,
//     Permits N; N is fixed by the first holder while any holder remains).
//     A shared acquire whose Permits differ from the current holders' fails
//     at once with lock.ErrPermitsMismatch.
//   - Each key has one FIFO queue across modes. A waiter is granted only
//     when it is compatible with the current holders and every waiter before
//     it was granted, so a waiting exclusive caller is never starved by
//     shared callers that came after it. When a key frees, the longest
//     compatible prefix of its queue is granted together.
//   - TryAcquire is refused (lock.HeldError) when the caller is incompatible
//     with the holders or anyone waits; a free key within its lock-delay
//     refuses with lock.DelayedError.
//   - Every grant gets a new token from the store's one counter, so a grant
//     after a release or expiry has a higher token than every earlier one.
//   - AcquireAll joins every key's queue at once, under the store's mutex:
//     arrival is one total order across keys, so two callers that list the
//     same keys in different orders cannot deadlock. It is granted when it
//     heads every queue and every key admits it, all keys in one step.
//   - A lease acquired with LockDelay D that ends by expiry keeps its key
//     from being granted until its expiry + D; a release ends no delay.
//   - Watch sends the key's holders, EventSynced, then every grant, release
//     and expiry with a store-wide Revision that increases by one per
//     change. A watcher more than memWatchBuffer events behind is dropped
//     with EventError{Err: lock.ErrWatchOverflow}.
//   - A caller that waits while incompatible with the holders makes every
//     holder wanted.
type MemStore struct {
	mu        sync.Mutex
	keys      map[string]*memKey
	lastToken lock.Token
	rev       uint64        // the revision of the latest change, of any key
	features  lock.Features // what the store offers; the rest it refuses
	bugs      bugs          // deliberate defects, set only by the suite's own tests
}

// memWatchBuffer is how many events a watcher may fall behind before it is
// dropped with lock.ErrWatchOverflow.
const memWatchBuffer = 1024

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

	sharedAdmitsExclusive bool // an exclusive acquire is admitted beside shared holders
	readersBypassWriter   bool // a shared acquire joins shared holders although a writer waits
	permitsExceeded       bool // a semaphore admits N+1 holders
	multiKeyPartialHold   bool // AcquireAll takes the keys one by one, holding some while waiting
	watchDropsExpired     bool // watchers are not told of expiries
	watchDropsQueuedGrant bool // watchers are not told of grants to queued waiters
	lockDelayIgnored      bool // an expired lease's lock-delay is ignored
	pretendsShared        bool // a store without FeatureShared grants shared acquires exclusively
}

type memKey struct {
	name       string
	holders    []*memHolder // oldest grant first; empty when free
	token      lock.Token   // the token of the latest grant of this key
	queue      []*memWaiter
	acquires   int       // counts acquires of a held key, for bugs.grantHeldKey
	expired    bool      // the last holder was freed by expiry, for bugs.reuseTokenOnTakeover
	delayUntil time.Time // the lock-delay of an expired lease ends then
	delayTimer *time.Timer
	watches    []*memWatch
}

type memHolder struct {
	owner, handle string
	token         lock.Token
	value         []byte
	mode          lock.Mode
	permits       int
	lockDelay     time.Duration
	expires       time.Time
	timer         *time.Timer
	lease         *lock.Lease // the holder's Lease, once attached: told when it is wanted
}

// memWaiter is a queued Acquire (one key) or AcquireAll (several): it is in
// the queue of each of its keys.
type memWaiter struct {
	keys []string
	opts lock.AcquireOptions
	done chan memResult // buffered: the granter never blocks
}

type memResult struct {
	grants []kit.Grant // one per key, in the order of keys
	err    error
}

type memWatch struct {
	ch     chan lock.Event // memWatchBuffer + 1: the last slot is for the overflow error
	closed bool
}

// NewMemStore returns an empty store that offers every primitive.
func NewMemStore() *MemStore { return NewMemStoreWithFeatures(lock.AllFeatures) }

// NewMemStoreWithFeatures returns an empty store that offers only the
// primitives in f and refuses the others with lock.ErrUnsupported, as a
// backend that lacks them must.
func NewMemStoreWithFeatures(f lock.Features) *MemStore {
	return &MemStore{keys: make(map[string]*memKey), features: f & lock.AllFeatures}
}

// NewLocker returns a new client of the store.
func (s *MemStore) NewLocker() *MemLocker {
	ctx, cancel := context.WithCancel(context.Background())
	return &MemLocker{store: s, clientID: "mem-" + lock.NewHandle()[:12], ctx: ctx, cancel: cancel}
}

// MemLocker is one client of a MemStore; it implements lock.Locker,
// lock.MultiLocker and lock.Watcher.
type MemLocker struct {
	store    *MemStore
	clientID string
	ctx      context.Context // ends at Close: stops waits, watches and keep-alives
	cancel   context.CancelFunc
}

var (
	_ lock.Locker          = (*MemLocker)(nil)
	_ lock.MultiLocker     = (*MemLocker)(nil)
	_ lock.Watcher         = (*MemLocker)(nil)
	_ lock.FeatureReporter = (*MemLocker)(nil)
)

// SignalsWanted implements lock.WantedSignaler: a holder's lease is marked
// wanted when a caller that its holding blocks queues for its key.
func (l *MemLocker) SignalsWanted() bool { return true }

// Features implements lock.FeatureReporter.
func (l *MemLocker) Features() lock.Features { return l.store.features }

const memBackend = "locktest.MemStore"

// check refuses options that need a primitive the store does not offer.
func (l *MemLocker) check(need lock.Features) error {
	have := l.store.features
	if l.store.bugs.pretendsShared {
		have |= lock.FeatureShared
	}
	return kit.CheckSupported(memBackend, have, need, func(lock.Features) string { return "not enabled in this MemStore" })
}

// Renew implements lock.Locker.
func (l *MemLocker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if l.ctx.Err() != nil {
		return lock.ErrClosed
	}
	ttl, err := kit.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	s := l.store
	s.mu.Lock()
	k := s.keyLocked(lease.Key)
	s.expireLocked(k, sent)
	s.scheduleLocked(lease.Key)
	i := k.holderIndex(lease)
	var h *memHolder
	switch {
	case i < 0 && s.bugs.renewRevivesExpired:
		h = &memHolder{owner: lease.Owner, handle: lease.Handle, token: lease.Token, value: lease.Value, mode: lease.Mode, permits: lease.Permits}
		k.holders = append(k.holders, h)
	case i < 0:
		s.mu.Unlock()
		return kit.Renewed(lease, sent, ttl, false)
	default:
		h = k.holders[i]
	}
	h.expires = sent.Add(ttl)
	s.armLocked(k, h, ttl)
	s.mu.Unlock()
	return kit.Renewed(lease, sent, ttl, true)
}

func (k *memKey) holderIndex(lease *lock.Lease) int {
	return slices.IndexFunc(k.holders, func(h *memHolder) bool { return h.handle == lease.Handle && h.token == lease.Token })
}

// Release implements lock.Locker.
func (l *MemLocker) Release(ctx context.Context, lease *lock.Lease) error {
	if l.ctx.Err() != nil {
		return lock.ErrClosed
	}
	if err := kit.ValidateLease(lease); err != nil {
		return err
	}
	s := l.store
	s.mu.Lock()
	k := s.keyLocked(lease.Key)
	s.expireLocked(k, time.Now())
	i := k.holderIndex(lease)
	ours := i >= 0
	if !ours && s.bugs.releaseIgnoresHandle && len(k.holders) > 0 {
		i = 0
	}
	if i >= 0 {
		s.removeLocked(k, i, lock.EventReleased)
	}
	s.scheduleLocked(lease.Key)
	s.mu.Unlock()
	return kit.Released(lease, ours)
}

// Inspect implements lock.Locker.
func (l *MemLocker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if l.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	s := l.store
	s.mu.Lock()
	defer s.mu.Unlock()
	k := s.keyLocked(key)
	s.expireLocked(k, time.Now())
	s.scheduleLocked(key)
	if len(k.holders) == 0 {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	h := k.holders[0]
	info := &lock.LockInfo{
		Key: key, Owner: h.owner, Token: h.token, Value: slices.Clone(h.value),
		Expires: h.expires, Waiters: len(k.queue), Mode: h.mode, Permits: h.permits,
	}
	if s.features&(lock.FeatureShared|lock.FeatureSemaphore) != 0 {
		for _, h := range k.holders {
			info.Holders = append(info.Holders, lock.HolderInfo{Owner: h.owner, Token: h.token, Value: slices.Clone(h.value), Expires: h.expires})
		}
	}
	return info, nil
}

// Close implements lock.Locker.
func (l *MemLocker) Close() error {
	l.cancel()
	return nil
}

// attach records lease as its holder's Lease, to be told when a caller
// waits; a lease granted while such callers already wait is told now.
func (s *MemStore) attach(lease *lock.Lease) {
	s.mu.Lock()
	k := s.keyLocked(lease.Key)
	i := slices.IndexFunc(k.holders, func(h *memHolder) bool { return h.handle == lease.Handle })
	if i < 0 {
		s.mu.Unlock()
		return
	}
	k.holders[i].lease = lease
	wanted := false
	if !s.bugs.neverWanted {
		for _, w := range k.queue {
			wanted = wanted || !s.admitsLocked(k, w.opts)
		}
	}
	s.mu.Unlock()
	if wanted {
		kit.MarkWanted(lease)
	}
}

// wantedLocked returns the leases to tell that a caller with opts queued on
// k (to be told once mu is released: kit.MarkWanted runs callbacks): every
// holder, when the holders keep the caller out.
func (s *MemStore) wantedLocked(k *memKey, opts lock.AcquireOptions) []*lock.Lease {
	var out []*lock.Lease
	switch {
	case s.bugs.neverWanted:
	case s.bugs.wantedByAny:
		for _, x := range s.keys {
			for _, h := range x.holders {
				if h.lease != nil {
					out = append(out, h.lease)
				}
			}
		}
	case !s.admitsLocked(k, opts):
		for _, h := range k.holders {
			if h.lease != nil {
				out = append(out, h.lease)
			}
		}
	}
	return out
}

func (s *MemStore) keyLocked(key string) *memKey {
	k := s.keys[key]
	if k == nil {
		k = &memKey{name: key}
		s.keys[key] = k
	}
	return k
}

// grantLocked adds the caller to k's holders. now, the grant's Sent, is
// taken before the TTL starts, so the holder's deadline is conservative.
func (s *MemStore) grantLocked(k *memKey, opts lock.AcquireOptions, now time.Time, queued bool) kit.Grant {
	s.lastToken++
	token := s.lastToken
	if s.bugs.reuseTokenOnTakeover && k.expired && k.token != 0 {
		token = k.token
	}
	k.token, k.expired = token, false
	h := &memHolder{
		owner: opts.Owner, handle: lock.NewHandle(), token: token, value: slices.Clone(opts.Value),
		mode: opts.Mode, permits: opts.Permits, lockDelay: opts.LockDelay, expires: now.Add(opts.TTL),
	}
	k.holders = append(k.holders, h)
	s.armLocked(k, h, opts.TTL)
	s.emitLocked(k, lock.EventGranted, h, queued)
	return kit.Grant{
		Key: k.name, Owner: h.owner, Token: token, Handle: h.handle, Value: opts.Value, TTL: opts.TTL,
		Mode: opts.Mode, Permits: opts.Permits, Sent: now,
	}
}

// armLocked (re)starts the timer that frees h when its TTL runs out, so
// that waiters are served at expiry without polling.
func (s *MemStore) armLocked(k *memKey, h *memHolder, ttl time.Duration) {
	if h.timer != nil {
		h.timer.Stop()
	}
	if s.bugs.neverExpire {
		return
	}
	h.timer = time.AfterFunc(ttl, func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.expireLocked(k, time.Now())
		s.scheduleLocked(k.name)
	})
}

// expireLocked frees k's holders whose TTL has passed and starts the
// lock-delay of those that asked for one. The caller schedules the key.
func (s *MemStore) expireLocked(k *memKey, now time.Time) {
	if s.bugs.neverExpire {
		return
	}
	for i := 0; i < len(k.holders); {
		h := k.holders[i]
		if now.Before(h.expires) {
			i++
			continue
		}
		k.expired = true
		if until := h.expires.Add(h.lockDelay); h.lockDelay > 0 && !s.bugs.lockDelayIgnored && until.After(k.delayUntil) {
			k.delayUntil = until
		}
		s.removeLocked(k, i, lock.EventExpired)
	}
}

// removeLocked removes the i-th holder of k (released or expired).
func (s *MemStore) removeLocked(k *memKey, i int, why lock.EventType) {
	h := k.holders[i]
	if h.timer != nil {
		h.timer.Stop()
	}
	k.holders = slices.Delete(k.holders, i, i+1)
	s.emitLocked(k, why, h, false)
}

// scheduleLocked grants the queues of keys, and of every key whose queue a
// grant or refusal changes, as far as FIFO order and the holders allow.
func (s *MemStore) scheduleLocked(keys ...string) {
	if s.bugs.releaseWakesNobody {
		return
	}
	now := time.Now()
	work := slices.Clone(keys)
	for len(work) > 0 {
		k := s.keys[work[0]]
		work = work[1:]
		for len(k.queue) > 0 {
			w := k.queue[0]
			var err error
			for _, name := range w.keys {
				if err == nil {
					err = mismatch(s.keys[name], w.opts)
				}
			}
			if err == nil && !s.grantableLocked(w, now) {
				break
			}
			s.unqueueLocked(w)
			work = append(work, w.keys...)
			if err != nil {
				w.done <- memResult{err: err}
				continue
			}
			grants := make([]kit.Grant, len(w.keys))
			for i, name := range w.keys {
				grants[i] = s.grantLocked(s.keys[name], w.opts, now, true)
			}
			w.done <- memResult{grants: grants}
		}
		s.delayLocked(k, now)
	}
}

// grantableLocked reports whether w heads the queue of each of its keys and
// each key admits it now.
func (s *MemStore) grantableLocked(w *memWaiter, now time.Time) bool {
	for _, name := range w.keys {
		k := s.keys[name]
		if k.queue[0] != w || !s.admitsLocked(k, w.opts) || now.Before(k.delayUntil) {
			return false
		}
	}
	return true
}

// delayLocked arms a timer that serves k's queue when its lock-delay ends.
func (s *MemStore) delayLocked(k *memKey, now time.Time) {
	if len(k.queue) == 0 || !now.Before(k.delayUntil) {
		return
	}
	if k.delayTimer != nil {
		k.delayTimer.Stop()
	}
	k.delayTimer = time.AfterFunc(k.delayUntil.Sub(now), func() {
		s.mu.Lock()
		defer s.mu.Unlock()
		s.expireLocked(k, time.Now())
		s.scheduleLocked(k.name)
	})
}
