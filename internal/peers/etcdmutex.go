package peers

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Defaults of EtcdMutexConfig.
const (
	// DefaultEtcdMutexPrefix is the etcd key prefix of the mutexes: a lock
	// key K is the concurrency.Mutex prefix <prefix>/<K path-escaped>.
	DefaultEtcdMutexPrefix = "/lockgate-mutex"

	// DefaultEtcdMutexSessionTTL is the TTL of the Locker's Session lease:
	// lock.DefaultTTL (20 s), the TTL of zklike's session lease, so that
	// the two etcd locks are compared at the same TTL. concurrency's own
	// default (60 s) would make every crashed holder in a fault campaign
	// cost a minute.
	DefaultEtcdMutexSessionTTL = lock.DefaultTTL

	// DefaultEtcdMutexRequestTimeout bounds each request that is not a
	// wait (TryLock, the release and renewal Txns) when the caller's
	// context has no deadline.
	DefaultEtcdMutexRequestTimeout = 5 * time.Second
)

// EtcdMutexConfig configures an EtcdMutex.
type EtcdMutexConfig struct {
	// Endpoints are the etcd client URLs. Ignored when Client is set.
	Endpoints []string
	// Client, if set, is used instead of dialling Endpoints; Close leaves
	// it open.
	Client *clientv3.Client
	// Prefix namespaces the mutexes. Empty means DefaultEtcdMutexPrefix.
	Prefix string
	// SessionTTL is the TTL of the Locker's one concurrency.Session, in
	// whole seconds (etcd's lease granularity; rounded up). Zero means
	// DefaultEtcdMutexSessionTTL. Every lease the Locker grants reports
	// this TTL, whatever TTL its acquisition asked for.
	SessionTTL time.Duration
	// DialTimeout bounds connecting to etcd. Zero means 5 s.
	DialTimeout time.Duration
	// RequestTimeout bounds each request that is not a wait. Zero means
	// DefaultEtcdMutexRequestTimeout.
	RequestTimeout time.Duration
	// ClientID is the default owner of leases. Empty means a random
	// "etcd-mutex-…" id.
	ClientID string
}

// EtcdMutex is a lock.Locker on go.etcd.io/etcd/client/v3/concurrency, as
// etcd's users lock: one clientv3.Client and one concurrency.Session per
// Locker, and for each acquisition a concurrency.NewMutex(session,
// <prefix>/<key>) locked with Lock(ctx) (TryLock for TryAcquire). What it
// does beyond calling the library is what any careful user of
// concurrency.Mutex must do too:
//
//   - Acquisitions of one key through one Locker are serialised in
//     process. Every Mutex of a Session waits under the key
//     <pfx>/<session lease id>, so two Mutexes of one Session on one key
//     both "hold" it (the second finds the first's key and takes it as its
//     own). A Locker therefore lets one acquisition per key at a time talk
//     to etcd; the others wait their turn locally, in arrival order.
//   - A lock key is path-escaped ("/" becomes %2F), so that the mutex of
//     "a" never counts the waiters of "a/b" (a Mutex prefix is a key range).
//   - A Lock or TryLock that fails with its outcome unknown (its Txn's
//     reply lost to a cancellation or a timeout) leaves a waiter key that
//     the Mutex does not remove; the Locker deletes it, so that a cancelled
//     Acquire holds nothing. A Lock that succeeds as the caller's context
//     ends is released.
//   - When the Session dies (its lease expired: the process was paused or
//     cut off past the TTL), every lease it held ends with lock.ErrNotHeld
//     and the next acquisition opens a new Session — what a user watching
//     Session.Done does.
//   - A lease that ends without Release (its deadline passed, a renewal
//     was refused) has its key deleted in the background, as a deferred
//     Unlock would, before the key's next local acquisition: a Mutex of
//     the same Session would otherwise take over the old key and its
//     create revision.
//
// The fencing token is the holder's create revision (the revision the
// Mutex compares in IsOwner, which etcd's documentation recommends for
// fencing): waiters are granted in create-revision order, so tokens
// strictly increase across the grants of a key.
//
// The lease TTL is the Session's. The first deadline of a grant counts
// from a third of the TTL before its Lock was sent: concurrency.Session
// does not tell when its last keep-alive was confirmed, and it refreshes
// every TTL/3, so the lease may have been kept alive last that long
// before (earlier still if a keep-alive failed). A user of
// the library has no deadline at all, only Session.Done; the Lease ends
// there too. Renew sends one keep-alive of the Session lease and checks
// the key; it cannot change the TTL. While the Session lives, etcd keeps a
// key past its Lease's deadline until Release (or the background delete
// above): the library ties a lock to its Session, not to a grant.
//
// Inspect names the holder's token and the number of waiters, not its
// owner: the Mutex stores no value.
type EtcdMutex struct {
	cfg     EtcdMutexConfig
	cli     *clientv3.Client
	ownsCli bool
	life    *life

	sessMu sync.Mutex // serialises opening a Session
	mu     sync.Mutex
	sess   *etcdSession
	gates  map[string]*keyGate
	held   map[string]*etcdHeld // by lease handle
	// closing is set by Close before it waits for the deletes of ended
	// leases: none starts after it.
	closing  bool
	cleanups sync.WaitGroup
}

var (
	_ lock.Locker              = (*EtcdMutex)(nil)
	_ interface{ Caps() Caps } = (*EtcdMutex)(nil)
)

// etcdSession is one concurrency.Session of the Locker.
type etcdSession struct {
	s   *concurrency.Session
	ttl time.Duration
}

// etcdHeld is one grant: the holder's key and create revision (what
// Mutex.IsOwner compares), its Session and the key's local turn.
type etcdHeld struct {
	lease *lock.Lease
	name  string // the Mutex key <pfx>/<lease id>
	rev   int64
	sess  *etcdSession
	leave func()
}

// owns is the Mutex's IsOwner comparison of this grant.
func (h *etcdHeld) owns() clientv3.Cmp {
	return clientv3.Compare(clientv3.CreateRevision(h.name), "=", h.rev)
}

// NewEtcdMutex connects to etcd (lazily: an unreachable cluster shows on
// the first call) and returns an EtcdMutex. The Session is opened by the
// first acquisition.
func NewEtcdMutex(cfg EtcdMutexConfig) (*EtcdMutex, error) {
	if cfg.Client == nil && len(cfg.Endpoints) == 0 {
		return nil, errors.New("peers: EtcdMutexConfig.Endpoints: at least one etcd endpoint is required (or set Client)")
	}
	if cfg.SessionTTL < 0 || cfg.SessionTTL > lock.MaxTTL {
		return nil, fmt.Errorf("peers: EtcdMutexConfig.SessionTTL: %v is outside [0, %v]", cfg.SessionTTL, lock.MaxTTL)
	}
	if strings.HasSuffix(cfg.Prefix, "/") {
		return nil, fmt.Errorf("peers: EtcdMutexConfig.Prefix: %q ends with '/'", cfg.Prefix)
	}
	if cfg.Prefix == "" {
		cfg.Prefix = DefaultEtcdMutexPrefix
	}
	if cfg.SessionTTL == 0 {
		cfg.SessionTTL = DefaultEtcdMutexSessionTTL
	}
	if cfg.DialTimeout == 0 {
		cfg.DialTimeout = 5 * time.Second
	}
	if cfg.RequestTimeout == 0 {
		cfg.RequestTimeout = DefaultEtcdMutexRequestTimeout
	}
	if cfg.ClientID == "" {
		cfg.ClientID = "etcd-mutex-" + lock.NewHandle()[:12]
	}
	cli, owns := cfg.Client, false
	if cli == nil {
		var err error
		cli, err = clientv3.New(clientv3.Config{
			Endpoints:   cfg.Endpoints,
			DialTimeout: cfg.DialTimeout,
			Logger:      zap.NewNop(),
		})
		if err != nil {
			return nil, fmt.Errorf("%w: etcd-mutex: connect to %v: %w", lock.ErrUnavailable, cfg.Endpoints, err)
		}
		owns = true
	}
	return &EtcdMutex{
		cfg: cfg, cli: cli, ownsCli: owns, life: newLife(),
		gates: make(map[string]*keyGate), held: make(map[string]*etcdHeld),
	}, nil
}

// Caps: create revisions fence, the Session lease frees a stopped
// holder's keys after its TTL, waiters are granted in create-revision
// order, and the holder's token can be read.
func (*EtcdMutex) Caps() Caps { return Caps{Fencing: true, TTL: true, FIFO: true, Inspect: true} }

// ClientID is the default owner of this Locker's leases.
func (e *EtcdMutex) ClientID() string { return e.cfg.ClientID }

// prefix is the Mutex prefix of key.
func (e *EtcdMutex) prefix(key string) string {
	return e.cfg.Prefix + "/" + url.PathEscape(key)
}

// session returns the Locker's live Session, opening one if there is none
// or the last one died. The lease is granted within ctx (the caller's
// request: concurrency.NewSession would grant it under the Session's
// context, the Locker's lifetime, and wait for an unreachable etcd beyond
// the caller's deadline); the Session's keep-alives live as long as the
// Locker.
func (e *EtcdMutex) session(ctx context.Context) (*etcdSession, error) {
	e.sessMu.Lock()
	defer e.sessMu.Unlock()
	e.mu.Lock()
	s := e.sess
	e.mu.Unlock()
	if s != nil {
		select {
		case <-s.s.Done():
		default:
			return s, nil
		}
	}
	secs := int((e.cfg.SessionTTL + time.Second - 1) / time.Second)
	// The Session's context is the Locker's: Close stops its keep-alives.
	grant, err := e.cli.Grant(ctx, int64(secs))
	if err != nil {
		return nil, fmt.Errorf("etcd-mutex: granting the session lease: %w", err)
	}
	cs, err := concurrency.NewSession(e.cli, concurrency.WithTTL(secs), concurrency.WithLease(grant.ID), concurrency.WithContext(e.life.Context()))
	if err != nil {
		return nil, err
	}
	s = &etcdSession{s: cs, ttl: time.Duration(secs) * time.Second}
	e.mu.Lock()
	e.sess = s
	e.mu.Unlock()
	e.life.Go(func() { e.watchSession(s) })
	return s, nil
}

// watchSession ends the leases of s when s dies before the Locker closes.
func (e *EtcdMutex) watchSession(s *etcdSession) {
	<-s.s.Done()
	if e.life.Context().Err() != nil {
		return // Close: held leases run out at their deadlines
	}
	e.mu.Lock()
	var lost []*etcdHeld
	for _, h := range e.held {
		if h.sess == s {
			lost = append(lost, h)
		}
	}
	e.mu.Unlock()
	for _, h := range lost {
		h.lease.End(fmt.Errorf("%w: etcd-mutex: the session lease of %q expired", lock.ErrNotHeld, h.lease.Key))
	}
}

// Acquire implements lock.Locker: it waits for the key's local turn, then
// in Mutex.Lock for the etcd lock.
func (e *EtcdMutex) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return e.life.Acquire(key, opts, e.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("etcd-mutex", opts); err != nil {
			return nil, err
		}
		return e.acquire(ctx, key, opts, false)
	})
}

// TryAcquire implements lock.Locker with Mutex.TryLock. A key that another
// acquisition of this Locker holds or is taking is reported as held.
func (e *EtcdMutex) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return e.life.Acquire(key, opts, e.cfg.ClientID, func(opts lock.AcquireOptions) (*lock.Lease, error) {
		if err := refuse("etcd-mutex", opts); err != nil {
			return nil, err
		}
		return e.acquire(ctx, key, opts, true)
	})
}

func (e *EtcdMutex) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	wctx, cancel := e.life.join(ctx)
	defer cancel()
	leave, err := enterGate(&e.mu, e.gates, wctx, key, try)
	if err != nil {
		return nil, e.life.fail(ctx, "etcd-mutex", "acquire", key, err)
	}
	if leave == nil {
		return nil, &lock.HeldError{Key: key}
	}
	for {
		// Within the caller's wait (not RequestTimeout: under load a lease
		// grant can take longer, and the wait it serves is unbounded too).
		s, err := e.session(wctx)
		if err != nil {
			leave()
			return nil, e.life.fail(ctx, "etcd-mutex", "acquire", key, err)
		}
		m := concurrency.NewMutex(s.s, e.prefix(key))
		sent := time.Now()
		if try {
			rctx, rcancel := bounded(wctx, e.cfg.RequestTimeout)
			err = m.TryLock(rctx)
			rcancel()
		} else {
			err = m.Lock(wctx)
		}
		if err == nil && wctx.Err() != nil {
			err = wctx.Err() // granted as the caller gave up: undo below
		}
		if err != nil {
			e.abandon(m)
			switch {
			case errors.Is(err, concurrency.ErrLocked):
				leave()
				return nil, &lock.HeldError{Key: key}
			case wctx.Err() == nil && (errors.Is(err, concurrency.ErrSessionExpired) || errors.Is(err, rpctypes.ErrLeaseNotFound)):
				continue // the Session died while waiting: queue again on a new one
			}
			leave()
			return nil, e.life.fail(ctx, "etcd-mutex", "acquire", key, err)
		}
		h := &etcdHeld{name: m.Key(), rev: ownRevision(m), sess: s, leave: leave}
		lease := kit.NewLease(kit.Grant{
			Key: key, Owner: opts.Owner, Token: lock.Token(h.rev), Handle: lock.NewHandle(),
			Value: opts.Value, TTL: s.ttl, Sent: sent.Add(-s.ttl / 3),
		})
		h.lease = lease
		e.mu.Lock()
		e.held[lease.Handle] = h
		e.mu.Unlock()
		lease.AfterEnd(func() { e.ended(lease) })
		if opts.AutoRenew {
			e.life.autoRenew(e, lease)
		}
		return lease, nil
	}
}

// ownRevision is the create revision of the Mutex's key, read from its
// IsOwner comparison (the Mutex does not export it otherwise).
func ownRevision(m *concurrency.Mutex) int64 {
	c := m.IsOwner()
	return c.GetCompare().GetCreateRevision()
}

// abandon deletes the waiter key a failed Lock or TryLock may have left.
// The key's local turn is still this caller's, so no other Mutex of the
// Session uses that key.
func (e *EtcdMutex) abandon(m *concurrency.Mutex) {
	name := m.Key()
	if name == "" || name == "\x00" {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	e.cli.Delete(ctx, name) // a failure leaves it to the Session lease's end
}

// take removes and returns the grant of lease, if this Locker holds it.
func (e *EtcdMutex) take(lease *lock.Lease) *etcdHeld {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.held[lease.Handle]
	if h == nil || h.lease.Key != lease.Key || h.lease.Token != lease.Token {
		return nil
	}
	delete(e.held, lease.Handle)
	return h
}

// ended runs when a lease ends. One that ended without Release has its key
// deleted in the background, and only then gives up the key's local turn.
func (e *EtcdMutex) ended(lease *lock.Lease) {
	e.mu.Lock()
	h := e.held[lease.Handle]
	if h == nil || h.lease != lease {
		e.mu.Unlock()
		return // released
	}
	delete(e.held, lease.Handle)
	if e.closing {
		e.mu.Unlock()
		h.leave()
		return
	}
	e.cleanups.Add(1)
	e.mu.Unlock()
	go func() {
		defer e.cleanups.Done()
		defer h.leave()
		ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
		defer cancel()
		e.cli.Txn(ctx).If(h.owns()).Then(clientv3.OpDelete(h.name)).Commit()
	}()
}

// Release implements lock.Locker: it deletes the holder's key if its
// create revision is still the lease's (Mutex.Unlock's delete, guarded by
// Mutex.IsOwner so that a lost lock is reported as lock.ErrNotHeld).
func (e *EtcdMutex) Release(ctx context.Context, lease *lock.Lease) error {
	return e.life.Release(lease, func() error { return e.release(ctx, lease) })
}

func (e *EtcdMutex) release(ctx context.Context, lease *lock.Lease) error {
	h := e.take(lease)
	if h == nil {
		return kit.Released(lease, false)
	}
	defer h.leave()
	rctx, cancel := bounded(ctx, e.cfg.RequestTimeout)
	resp, err := e.cli.Txn(rctx).If(h.owns()).Then(clientv3.OpDelete(h.name)).Commit()
	cancel()
	if err != nil {
		// Unknown outcome: delete it on a context of our own, as the grant
		// is no longer tracked.
		ctx2, cancel2 := context.WithTimeout(context.Background(), cleanupTimeout)
		e.cli.Txn(ctx2).If(h.owns()).Then(clientv3.OpDelete(h.name)).Commit()
		cancel2()
		lease.End(fmt.Errorf("%w: %w", lock.ErrNotHeld, err))
		return e.life.fail(ctx, "etcd-mutex", "release", lease.Key, err)
	}
	return kit.Released(lease, resp.Succeeded)
}

// Renew implements lock.Locker: one keep-alive of the Session lease (which
// the Session also sends every TTL/3), then a check that the key is still
// the grant's. The TTL stays the Session's, whatever ttl asks.
func (e *EtcdMutex) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return e.life.Renew(lease, ttl, func(ttl time.Duration) error { return e.renew(ctx, lease, ttl) })
}

func (e *EtcdMutex) renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	e.mu.Lock()
	h := e.held[lease.Handle]
	e.mu.Unlock()
	if h == nil || h.lease.Key != lease.Key || h.lease.Token != lease.Token {
		return kit.Renewed(lease, time.Now(), ttl, false)
	}
	rctx, cancel := bounded(ctx, e.cfg.RequestTimeout)
	defer cancel()
	sent := time.Now()
	ka, err := e.cli.KeepAliveOnce(rctx, h.sess.s.Lease())
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return kit.Renewed(lease, sent, ttl, false)
	}
	if err != nil {
		return e.life.fail(ctx, "etcd-mutex", "renew", lease.Key, err)
	}
	resp, err := e.cli.Txn(rctx).If(h.owns()).Commit()
	if err != nil {
		return e.life.fail(ctx, "etcd-mutex", "renew", lease.Key, err)
	}
	return kit.Renewed(lease, sent, time.Duration(ka.TTL)*time.Second, resp.Succeeded)
}

// Inspect implements lock.Locker: the key under the mutex prefix with the
// lowest create revision is the holder's (as Mutex.Lock decides); its
// create revision is the token and the other keys are waiters. The owner
// is unknown: the Mutex stores no value.
func (e *EtcdMutex) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	return e.life.Inspect(key, func() (*lock.LockInfo, error) { return e.inspect(ctx, key) })
}

func (e *EtcdMutex) inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	rctx, cancel := bounded(ctx, e.cfg.RequestTimeout)
	defer cancel()
	resp, err := e.cli.Get(rctx, e.prefix(key)+"/", clientv3.WithFirstCreate()...)
	if err != nil {
		return nil, e.life.fail(ctx, "etcd-mutex", "inspect", key, err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	}
	return &lock.LockInfo{Key: key, Token: lock.Token(resp.Kvs[0].CreateRevision), Waiters: int(resp.Count - 1)}, nil
}

// Close implements lock.Locker: waiting acquisitions return
// lock.ErrClosed (their Mutexes remove their keys), auto-renewal and the
// Session's keep-alives stop. The Session lease is revoked if no lease is
// held; otherwise it is left to run out, so that held keys stay until
// their holders' deadlines have passed (unless released first).
func (e *EtcdMutex) Close() error {
	if !e.life.Close() {
		return nil
	}
	e.mu.Lock()
	e.closing = true
	s, held := e.sess, len(e.held)
	e.mu.Unlock()
	e.cleanups.Wait()
	if s != nil && held == 0 {
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RequestTimeout)
		e.cli.Revoke(ctx, s.s.Lease())
		cancel()
	}
	if e.ownsCli {
		return e.cli.Close()
	}
	return nil
}

// keyGate is the local turn of one key in a Locker that must not let two
// acquisitions of a key reach its library at once: a one-slot channel
// (blocked senders are served in arrival order) and the number of callers
// using it, so that the map entry goes when the last leaves.
type keyGate struct {
	slot chan struct{}
	refs int
}

// enterGate takes key's turn in gates (guarded by mu), waiting until ctx
// ends unless try. It returns the function that gives the turn up; nil
// with a nil error when try found the turn taken.
func enterGate(mu *sync.Mutex, gates map[string]*keyGate, ctx context.Context, key string, try bool) (func(), error) {
	mu.Lock()
	g := gates[key]
	if g == nil {
		g = &keyGate{slot: make(chan struct{}, 1)}
		gates[key] = g
	}
	g.refs++
	mu.Unlock()
	drop := func() {
		mu.Lock()
		if g.refs--; g.refs == 0 {
			delete(gates, key)
		}
		mu.Unlock()
	}
	if try {
		select {
		case g.slot <- struct{}{}:
		default:
			drop()
			return nil, nil
		}
	} else {
		select {
		case g.slot <- struct{}{}:
		case <-ctx.Done():
			drop()
			return nil, ctx.Err()
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			<-g.slot
			drop()
		})
	}, nil
}
