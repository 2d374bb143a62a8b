package peers

import (
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The primitives beyond the mutex (lock.Features): shared locks, semaphores,
// multi-key acquires, watches and lock-delay. A wrapper offers one only
// where its library does it; none of the wrapped libraries does, so every
// wrapper reports none and refuses an acquire that needs one before its
// library is called (lock.ErrUnsupported, with the reason below), rather
// than building the primitive itself.

var (
	_ lock.FeatureReporter = (*EtcdMutex)(nil)
	_ lock.FeatureReporter = (*Redsync)(nil)
	_ lock.FeatureReporter = (*Redislock)(nil)
	_ lock.FeatureReporter = (*PGAdvisory)(nil)
	_ lock.FeatureReporter = (*ZooKeeper)(nil)
)

// Features implements lock.FeatureReporter: none.
func (*EtcdMutex) Features() lock.Features { return 0 }

// Features implements lock.FeatureReporter: none.
func (*Redsync) Features() lock.Features { return 0 }

// Features implements lock.FeatureReporter: none.
func (*Redislock) Features() lock.Features { return 0 }

// Features implements lock.FeatureReporter: none.
func (*PGAdvisory) Features() lock.Features { return 0 }

// Features implements lock.FeatureReporter: none.
func (*ZooKeeper) Features() lock.Features { return 0 }

// reasons says, per feature, why a library does not offer it (quoted by
// docs/backends.md).
type reasons map[lock.Features]string

// Unsupported are the reasons of each wrapper, by its backend name
// (internal/backends spells the same names).
var Unsupported = map[string]reasons{
	"etcd-mutex": {
		lock.FeatureShared:    "concurrency.Mutex is exclusive; the RWMutex of etcd's experimental recipes package is not what etcd's users lock with, and is not wrapped",
		lock.FeatureSemaphore: "etcd's client has no semaphore recipe",
		lock.FeatureMultiKey:  "concurrency.Mutex locks one prefix; Mutexes taken in turn hold some keys while waiting for others",
		lock.FeatureWatch:     "concurrency.Mutex has no watch of its holders (concurrency.Election's Observe belongs to another recipe)",
		lock.FeatureLockDelay: "etcd has no lock-delay: a session lease's expiry deletes its keys and the next waiter is granted at once",
	},
	"zookeeper": {
		lock.FeatureShared:    "go-zookeeper/zk implements only the exclusive lock recipe (ZooKeeper's documented shared-lock recipe is not in the library)",
		lock.FeatureSemaphore: "go-zookeeper/zk has no semaphore (Curator's InterProcessSemaphoreV2 is Java-only)",
		lock.FeatureMultiKey:  "zk.Lock locks one path; Locks taken in turn hold some keys while waiting for others",
		lock.FeatureWatch:     "zk.Lock exposes no holder events",
		lock.FeatureLockDelay: "ZooKeeper has no lock-delay: an expired session's ephemeral node is deleted and the next node in line is granted at once",
	},
	"redsync": {
		lock.FeatureShared:    "redsync's Mutex is Redlock's exclusive lock; Redlock's safety argument is for one exclusive holder per key",
		lock.FeatureSemaphore: "redsync has no semaphore, and one counted on independent masters over-grants (each master bounds only its own count)",
		lock.FeatureMultiKey:  "a redsync Mutex locks one key; Mutexes taken in turn hold some keys while waiting for others",
		lock.FeatureWatch:     "redsync has no watch (Redis keeps no history of a key's grants)",
		lock.FeatureLockDelay: "redsync has no lock-delay: a key past its expiry is free at once",
	},
	"redislock": {
		lock.FeatureShared:    "bsm/redislock's Obtain is an exclusive SET NX PX lock",
		lock.FeatureSemaphore: "bsm/redislock has no semaphore",
		lock.FeatureMultiKey:  "bsm/redislock's Obtain locks one key; Obtains taken in turn hold some keys while waiting for others",
		lock.FeatureWatch:     "bsm/redislock has no watch (Redis keeps no history of a key's grants)",
		lock.FeatureLockDelay: "bsm/redislock has no lock-delay: a key past its TTL is free at once",
	},
	"pg-advisory": {
		lock.FeatureShared:    "PostgreSQL has pg_advisory_lock_shared, but an advisory lock has no token and no TTL, so a shared grant could not be fenced or expire; the wrapper measures the exclusive lock only",
		lock.FeatureSemaphore: "PostgreSQL's advisory locks have no counted mode",
		lock.FeatureMultiKey:  "pg_advisory_lock takes one key per call; calls in turn hold some keys while waiting for others (the deadlock detector then aborts one)",
		lock.FeatureWatch:     "PostgreSQL raises no event when an advisory lock is taken or freed (pg_locks is a snapshot)",
		lock.FeatureLockDelay: "an advisory lock has no TTL: it ends with its session, with no delay",
	},
}

// refuse returns the lock.ErrUnsupported error of an acquire through the
// wrapper named backend whose options need a primitive (all of them are
// missing), or nil.
func refuse(backend string, opts lock.AcquireOptions) error {
	r := Unsupported[backend]
	return kit.CheckSupported(backend, 0, kit.Needs(opts), func(f lock.Features) string { return r[f] })
}
