// Package peers wraps the lock libraries that lockgate's users would
// otherwise pick as lock.Lockers, so that `lockgate-bench` measures them
// through the same workloads, histograms and fault campaigns as lockgate's
// own backends, in the same run:
//
//   - EtcdMutex: go.etcd.io/etcd/client/v3/concurrency's Mutex on one
//     Session per Locker (the way etcd's users lock);
//   - Redsync: github.com/go-redsync/redsync/v4 over independent Redis
//     masters (Redlock as most Go users run it);
//   - Redislock: github.com/bsm/redislock on one Redis (single-instance
//     locking);
//   - PGAdvisory: PostgreSQL's pg_advisory_lock on a session held per lock;
//   - ZooKeeper: github.com/go-zookeeper/zk's Lock recipe on a real
//     ZooKeeper ensemble.
//
// Each wrapper does what its library does and no more: where a library
// has no fencing token, no TTL, no FIFO order or no way to name the
// holder, the wrapper says so in its Caps instead of building the missing
// part, and the bench marks the gap in its report. A Lease from a wrapper
// without fencing carries Token 0; its Inspect returns ErrUnsupported
// when the library cannot name a holder.
package peers

import (
	"errors"

	"github.com/lockgate/lockgate/internal/backends"
)

// Caps is what a lock implementation guarantees (backends.Caps): the
// wrappers' own, which the bench's table of backends shows.
type Caps = backends.Caps

// ErrUnsupported is returned by an operation the wrapped library does not
// offer (Inspect on a library that cannot name a holder, Renew on one
// without TTLs).
var ErrUnsupported = errors.New("peers: the library does not support this operation")
