package backends

import (
	"context"
	"fmt"

	"github.com/lockgate/lockgate/backend/redlock"
	"github.com/lockgate/lockgate/backend/sqllock"
	"github.com/lockgate/lockgate/backend/zklike"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// table is the one table of backends, in the order reports show them:
// ours, then the peer libraries each is compared with, which the package
// wrapping them adds (Register) where it is linked: the bench, not serve.
var table = []entry{
	{name: Raft, kind: KindRaft, caps: Caps{Fencing: true, TTL: true, FIFO: true, Inspect: true, Wanted: true},
		variants: []variant{{name: "cluster", mode: "SDK to a 3-node raftlock cluster (leader-local FIFO queues, fsync'd log)",
			open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
				return client.New(sp.Raft, client.Options{RequestTimeout: o.RequestTimeout, CacheLeases: o.CacheLeases})
			}}}},
	{name: Redlock, kind: KindRedis, caps: Caps{Fencing: true, TTL: true, Inspect: true, Wanted: true},
		variants: []variant{
			{name: "quorum", mode: "Redlock over every Redis master given (5 in the bench), majority quorum",
				open: func(_ context.Context, sp Spec, _ Options) (lock.Locker, error) {
					return redlock.New(redlock.DefaultConfig(sp.Redlock...))
				}},
			{name: "single", mode: "one Redis (the first master): plain single-instance locking, no replication",
				open: func(_ context.Context, sp Spec, _ Options) (lock.Locker, error) {
					return redlock.New(redlock.DefaultConfig(sp.Redlock[0]))
				}},
		}},
	{name: Postgres, kind: KindPostgres, caps: Caps{Fencing: true, TTL: true, Inspect: true, Wanted: true},
		variants: []variant{{name: "rows", mode: "sqllock: a row per lock, in-process queue and LISTEN/NOTIFY wake-ups",
			open: func(ctx context.Context, sp Spec, o Options) (lock.Locker, error) {
				cfg := sqllock.DefaultConfig(sp.Postgres)
				if o.PoolSize != 0 {
					cfg.PoolSize = o.PoolSize
				}
				return sqllock.New(ctx, cfg)
			}}}},
	{name: Etcd, kind: KindEtcd, caps: Caps{Fencing: true, TTL: true, FIFO: true, Inspect: true, Wanted: true}, serve: "lease",
		variants: []variant{
			{name: "session", session: true, mode: "zklike, every lock on the Locker's session lease (as concurrency.Mutex on a Session)",
				open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
					l, err := openZklike(sp, o)
					if err != nil {
						return nil, err
					}
					return sessionLocks{l}, nil
				}},
			{name: "lease", mode: "zklike, a lease of its own per lock with the requested TTL (a LeaseGrant per acquisition)",
				open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) { return openZklike(sp, o) }},
		}},
}

func openZklike(sp Spec, o Options) (lock.Locker, error) {
	cfg := zklike.DefaultConfig(sp.Etcd...)
	if o.SessionTTL != 0 {
		cfg.SessionTTL = o.SessionTTL
	}
	return zklike.New(cfg)
}

// sessionLocks puts every lock on a session lease of the Locker: zklike
// gives an auto-renewed lock the Locker's session lease of that TTL,
// granted once and kept alive by the Locker, as concurrency.Mutex shares a
// concurrency.Session; a lock with a TTL and no auto-renewal would get a
// lease of its own (the "lease" variant).
type sessionLocks struct{ lock.Locker }

func (s sessionLocks) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	opts.AutoRenew = true
	return s.Locker.Acquire(ctx, key, opts)
}

// SignalsWanted passes on zklike's wanted signal.
func (s sessionLocks) SignalsWanted() bool { return lock.SignalsWanted(s.Locker) }

func (s sessionLocks) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	opts.AutoRenew = true
	return s.Locker.TryAcquire(ctx, key, opts)
}

// The wrapper offers exactly the primitives of the Locker it wraps
// (lock.Features), passing them through: a method of the wrapped Locker
// is not promoted through the embedded interface, so without these the
// wrapping would hide them.
var (
	_ lock.FeatureReporter = sessionLocks{}
	_ lock.MultiLocker     = sessionLocks{}
	_ lock.Watcher         = sessionLocks{}
)

// Features passes on the wrapped Locker's features.
func (s sessionLocks) Features() lock.Features { return lock.FeaturesOf(s.Locker) }

// AcquireAll passes on to the wrapped Locker's (lock.ErrUnsupported if it
// has none), with every lock on the session.
func (s sessionLocks) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	opts.AutoRenew = true
	return lock.AcquireAll(ctx, s.Locker, keys, opts)
}

// TryAcquireAll passes on to the wrapped Locker's (lock.ErrUnsupported if
// it has none), with every lock on the session.
func (s sessionLocks) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	m, ok := s.Locker.(lock.MultiLocker)
	if !ok || !lock.FeaturesOf(s.Locker).Has(lock.FeatureMultiKey) {
		return nil, &lock.UnsupportedError{Backend: fmt.Sprintf("%T", s.Locker), Feature: lock.FeatureMultiKey}
	}
	opts.AutoRenew = true
	return m.TryAcquireAll(ctx, keys, opts)
}

// Watch passes on to the wrapped Locker's (lock.ErrUnsupported if it has
// none).
func (s sessionLocks) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	return lock.Watch(ctx, s.Locker, key)
}

// Peer is a lock library that lockgate's users would otherwise pick, as
// the bench measures it beside the backend of ours named by PeerOf.
type Peer struct {
	Name, Kind, PeerOf string
	// Caps are the wrapper's own.
	Caps Caps
	// Variants are the modes it can run in; the first is the default.
	Variants []Variant
}

// Variant is one mode of a peer library.
type Variant struct {
	Name string
	// Mode says in a few words how the Locker is run, for the reports.
	Mode string
	// Session: its locks live on a client session (Caps.Session).
	Session bool
	Open    func(ctx context.Context, spec Spec, opts Options) (lock.Locker, error)
}

// Register adds a peer library to the table, after those already in it
// (internal/peers registers its wrappers when it is linked). It is called
// from a package's initialisation, before the table is read; it panics on
// a name already taken or a peer of no backend of ours.
func Register(p Peer) {
	if _, err := lookup(p.Name); err == nil {
		panic("backends: " + p.Name + " registered twice")
	}
	if e, err := lookup(p.PeerOf); err != nil || e.peerOf != "" || len(p.Variants) == 0 {
		panic("backends: peer " + p.Name + " of no backend of ours, or of no variant")
	}
	e := entry{name: p.Name, kind: p.Kind, peerOf: p.PeerOf, caps: p.Caps}
	for _, v := range p.Variants {
		e.variants = append(e.variants, variant{name: v.Name, mode: v.Mode, session: v.Session, open: v.Open})
	}
	table = append(table, e)
	Names = append(Names, p.Name)
}
