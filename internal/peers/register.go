package peers

import (
	"context"

	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// The wrappers join the table of backends wherever this package is
// linked (the bench), each grouped with the backend of ours it is
// compared with; `lockgate serve` does not link them.
func init() {
	backends.Register(backends.Peer{Name: backends.EtcdMutex, Kind: backends.KindEtcd, PeerOf: backends.Etcd, Caps: (*EtcdMutex)(nil).Caps(),
		Variants: []backends.Variant{{Name: "session", Session: true,
			Mode: "go.etcd.io/etcd/client/v3/concurrency Mutex on one Session per client",
			Open: func(_ context.Context, sp backends.Spec, o backends.Options) (lock.Locker, error) {
				return NewEtcdMutex(EtcdMutexConfig{Endpoints: sp.Etcd, SessionTTL: o.SessionTTL})
			}}}})
	backends.Register(backends.Peer{Name: backends.ZooKeeper, Kind: backends.KindZooKeeper, PeerOf: backends.Etcd, Caps: (*ZooKeeper)(nil).Caps(),
		Variants: []backends.Variant{{Name: "recipe", Session: true,
			Mode: "github.com/go-zookeeper/zk Lock (the ZooKeeper lock recipe) on a 3-server ensemble, one session per client",
			Open: func(ctx context.Context, sp backends.Spec, o backends.Options) (lock.Locker, error) {
				return NewZooKeeper(ctx, ZooKeeperConfig{Addrs: sp.ZooKeeper, SessionTimeout: o.SessionTTL})
			}}}})
	backends.Register(backends.Peer{Name: backends.Redsync, Kind: backends.KindRedis, PeerOf: backends.Redlock, Caps: (*Redsync)(nil).Caps(),
		Variants: []backends.Variant{{Name: "quorum",
			Mode: "github.com/go-redsync/redsync/v4 over every Redis master given, its default tries and retry delay",
			Open: func(_ context.Context, sp backends.Spec, o backends.Options) (lock.Locker, error) {
				return NewRedsync(RedsyncConfig{Addrs: sp.Redlock, RequestTimeout: o.RequestTimeout})
			}}}})
	backends.Register(backends.Peer{Name: backends.Redislock, Kind: backends.KindRedis, PeerOf: backends.Redlock, Caps: (*Redislock)(nil).Caps(),
		Variants: []backends.Variant{{Name: "single",
			Mode: "github.com/bsm/redislock on one Redis (the first master), linear back-off while it waits",
			Open: func(_ context.Context, sp backends.Spec, o backends.Options) (lock.Locker, error) {
				return NewRedislock(RedislockConfig{Addr: sp.Redlock[0], RequestTimeout: o.RequestTimeout})
			}}}})
	backends.Register(backends.Peer{Name: backends.PGAdvisory, Kind: backends.KindPostgres, PeerOf: backends.Postgres, Caps: (*PGAdvisory)(nil).Caps(),
		Variants: []backends.Variant{{Name: "session",
			Mode: "pg_advisory_lock on a pooled connection held per lock: no TTL, no fencing token",
			Open: func(ctx context.Context, sp backends.Spec, o backends.Options) (lock.Locker, error) {
				return NewPGAdvisory(ctx, PGAdvisoryConfig{URL: sp.Postgres, PoolSize: o.PoolSize, RequestTimeout: o.RequestTimeout})
			}}}})
}
