package backends

import (
	"context"
	"fmt"

	"github.com/lockgate/lockgate/backend/redlock"
	"github.com/lockgate/lockgate/backend/sqllock"
	"github.com/lockgate/lockgate/backend/zklike"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/peers"
	"github.com/lockgate/lockgate/lock"
)

// table is the one table of backends, in the order reports show them:
// ours, then the peer libraries each is compared with.
var table = []entry{
	{name: Raft, kind: KindRaft, caps: Caps{Fencing: true, TTL: true, FIFO: true, Inspect: true, Wanted: true},
		variants: []variant{{name: "cluster", mode: "SDK to a 3-node raftlock cluster (leader-local FIFO queues, fsync'd log)",
			open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
				return client.New(sp.Raft, client.Options{RequestTimeout: o.RequestTimeout})
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

	// The peer libraries, each grouped with the backend of ours it is
	// compared with; their Caps are the wrappers' own.
	{name: EtcdMutex, kind: KindEtcd, peerOf: Etcd, caps: (*peers.EtcdMutex)(nil).Caps(),
		variants: []variant{{name: "session", session: true,
			mode: "go.etcd.io/etcd/client/v3/concurrency Mutex on one Session per client",
			open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
				return peers.NewEtcdMutex(peers.EtcdMutexConfig{Endpoints: sp.Etcd, SessionTTL: o.SessionTTL})
			}}}},
	{name: ZooKeeper, kind: KindZooKeeper, peerOf: Etcd, caps: (*peers.ZooKeeper)(nil).Caps(),
		variants: []variant{{name: "recipe", session: true,
			mode: "github.com/go-zookeeper/zk Lock (the ZooKeeper lock recipe) on a 3-server ensemble, one session per client",
			open: func(ctx context.Context, sp Spec, o Options) (lock.Locker, error) {
				return peers.NewZooKeeper(ctx, peers.ZooKeeperConfig{Addrs: sp.ZooKeeper, SessionTimeout: o.SessionTTL})
			}}}},
	{name: Redsync, kind: KindRedis, peerOf: Redlock, caps: (*peers.Redsync)(nil).Caps(),
		variants: []variant{{name: "quorum",
			mode: "github.com/go-redsync/redsync/v4 over every Redis master given, its default tries and retry delay",
			open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
				return peers.NewRedsync(peers.RedsyncConfig{Addrs: sp.Redlock, RequestTimeout: o.RequestTimeout})
			}}}},
	{name: Redislock, kind: KindRedis, peerOf: Redlock, caps: (*peers.Redislock)(nil).Caps(),
		variants: []variant{{name: "single",
			mode: "github.com/bsm/redislock on one Redis (the first master), linear back-off while it waits",
			open: func(_ context.Context, sp Spec, o Options) (lock.Locker, error) {
				return peers.NewRedislock(peers.RedislockConfig{Addr: sp.Redlock[0], RequestTimeout: o.RequestTimeout})
			}}}},
	{name: PGAdvisory, kind: KindPostgres, peerOf: Postgres, caps: (*peers.PGAdvisory)(nil).Caps(),
		variants: []variant{{name: "session",
			mode: "pg_advisory_lock on a pooled connection held per lock: no TTL, no fencing token",
			open: func(ctx context.Context, sp Spec, o Options) (lock.Locker, error) {
				return peers.NewPGAdvisory(ctx, peers.PGAdvisoryConfig{URL: sp.Postgres, PoolSize: o.PoolSize, RequestTimeout: o.RequestTimeout})
			}}}},
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
