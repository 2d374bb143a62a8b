package latency

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// modeStore is an in-process lock with modes, semaphores and multi-key
// acquire, shared by the modeLockers of a test: enough for the workloads'
// own tests, with no servers. Leases do not expire (the tests release
// them); a wait is a poll of the condition on every change.
type modeStore struct {
	mu    sync.Mutex
	cond  *sync.Cond
	keys  map[string]*modeKey
	token lock.Token
	// broken, when set, grants an exclusive acquire even over shared
	// holders (a lock that breaks its read-write promise).
	broken bool
	// What it granted: shared and exclusive grants, multi-key acquires,
	// and the most shared holders a key had at once.
	sharedGrants, exclusiveGrants, multiGrants int
	maxShared                                  int
}

type modeKey struct {
	exclusive bool
	shared    int
	permits   int
}

func newModeStore() *modeStore {
	s := &modeStore{keys: map[string]*modeKey{}}
	s.cond = sync.NewCond(&s.mu)
	return s
}

// modeLocker is one client of a modeStore; features says what it offers.
type modeLocker struct {
	s        *modeStore
	features lock.Features
	owner    string
}

var (
	_ lock.MultiLocker     = (*modeLocker)(nil)
	_ lock.FeatureReporter = (*modeLocker)(nil)
)

func (l *modeLocker) Features() lock.Features { return l.features }

// free reports whether key can be granted in opts' mode (s.mu held).
func (s *modeStore) free(key string, opts lock.AcquireOptions) bool {
	k := s.keys[key]
	if k == nil {
		return true
	}
	if opts.Mode == lock.ModeShared {
		return !k.exclusive && (opts.Permits == 0 || k.shared < opts.Permits)
	}
	return !k.exclusive && (k.shared == 0 || s.broken)
}

func (s *modeStore) grant(key, owner string, opts lock.AcquireOptions) *lock.Lease {
	k := s.keys[key]
	if k == nil {
		k = &modeKey{}
		s.keys[key] = k
	}
	if opts.Mode == lock.ModeShared {
		k.shared++
		k.permits = opts.Permits
		s.sharedGrants++
		s.maxShared = max(s.maxShared, k.shared)
	} else {
		k.exclusive = true
		s.exclusiveGrants++
	}
	s.token++
	ttl := opts.TTL
	if ttl == 0 {
		ttl = time.Minute
	}
	return kit.NewLease(kit.Grant{Key: key, Owner: owner, Token: s.token, Handle: lock.NewHandle(), TTL: ttl,
		Mode: opts.Mode, Permits: opts.Permits, Sent: time.Now()})
}

func (l *modeLocker) check(opts lock.AcquireOptions) (lock.AcquireOptions, error) {
	if opts.Permits > 0 {
		opts.Mode = lock.ModeShared
	}
	return opts, kit.CheckSupported("mode", l.features, kit.Needs(opts), nil)
}

// wait blocks until ok() (s.mu held) or ctx ends.
func (s *modeStore) wait(ctx context.Context, ok func() bool) error {
	stop := context.AfterFunc(ctx, func() {
		s.mu.Lock()
		s.cond.Broadcast()
		s.mu.Unlock()
	})
	defer stop()
	for !ok() {
		if err := ctx.Err(); err != nil {
			return err
		}
		s.cond.Wait()
	}
	return nil
}

func (l *modeLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	opts, err := l.check(opts)
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if err := l.s.wait(ctx, func() bool { return l.s.free(key, opts) }); err != nil {
		return nil, err
	}
	return l.s.grant(key, l.owner, opts), nil
}

func (l *modeLocker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	opts, err := l.check(opts)
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	if !l.s.free(key, opts) {
		return nil, lock.ErrNotAcquired
	}
	return l.s.grant(key, l.owner, opts), nil
}

func (l *modeLocker) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	if !l.features.Has(lock.FeatureMultiKey) {
		return nil, &lock.UnsupportedError{Backend: "mode", Feature: lock.FeatureMultiKey}
	}
	opts, err := l.check(opts)
	if err != nil {
		return nil, err
	}
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	all := func() bool {
		for _, k := range keys {
			if !l.s.free(k, opts) {
				return false
			}
		}
		return true
	}
	if err := l.s.wait(ctx, all); err != nil {
		return nil, err
	}
	l.s.multiGrants++
	leases := make([]*lock.Lease, len(keys))
	for i, k := range keys {
		leases[i] = l.s.grant(k, l.owner, opts)
	}
	return leases, nil
}

func (l *modeLocker) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return nil, fmt.Errorf("modeLocker: TryAcquireAll: not used by the bench")
}

func (l *modeLocker) Release(ctx context.Context, lease *lock.Lease) error {
	l.s.mu.Lock()
	defer l.s.mu.Unlock()
	k := l.s.keys[lease.Key]
	switch {
	case k == nil:
		return lock.ErrNotHeld
	case lease.Mode == lock.ModeShared && k.shared > 0:
		k.shared--
	case lease.Mode == lock.ModeExclusive && k.exclusive:
		k.exclusive = false
	default:
		return lock.ErrNotHeld
	}
	if !k.exclusive && k.shared == 0 {
		delete(l.s.keys, lease.Key)
	}
	lease.End(nil)
	l.s.cond.Broadcast()
	return nil
}

func (l *modeLocker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return nil
}

func (l *modeLocker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return nil, lock.ErrNotFound
}

func (l *modeLocker) Close() error { return nil }

// modeConn is a Conn of n modeLockers of one store offering features.
func modeConn(s *modeStore, n int, features lock.Features) *provision.Conn {
	c := &provision.Conn{Backend: provision.Raft, Via: provision.Direct}
	for i := range n {
		c.Clients = append(c.Clients, &modeLocker{s: s, features: features, owner: fmt.Sprintf("c%d", i)})
	}
	return c
}
