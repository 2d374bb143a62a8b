package redlock

import (
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The primitives beyond the mutex (lock.Features): redlock offers none of them, and
// refuses an acquire that needs one before any request reaches a master
// (lock.ErrUnsupported, with one of the reasons below). N = 1 (a single
// Redis) is refused too: the Locker is one implementation whatever N is,
// and what N = 1 could offer (Redisson's read-write lock and semaphores)
// is a single-Redis design, not Redlock.

var _ lock.FeatureReporter = (*Locker)(nil)

// Features implements lock.FeatureReporter: none.
func (l *Locker) Features() lock.Features { return 0 }

// Reasons for each primitive redlock does not offer, as docs/backends.md
// quotes them.
const (
	ReasonShared = "Redlock's safety argument (a majority of independent masters, each holding the key once with a TTL) is for one exclusive holder per key; " +
		"a read-write lock needs a set of holders and one FIFO queue of both modes that every master agrees on, which independent masters without consensus cannot keep " +
		"(Redisson's RReadWriteLock is built for one Redis, not for a quorum of masters)"
	ReasonSemaphore = "a semaphore counted on independent masters over-grants: each master bounds only its own count, and with 5 masters and N = 2 three holders can each win " +
		"3 masters while no master counts more than 2 permits (Redisson's RSemaphore and RPermitExpirableSemaphore assume one Redis)"
	ReasonMultiKey = "not implemented: an all-or-nothing grant needs every key set in one script on each master and a quorum for the whole set, undone on a split vote; " +
		"contending callers then retry split votes with no queue to order them (raftlock and zklike queue multi-key callers instead)"
	ReasonWatch = "Redis keeps no history of a key's grants: pub/sub and keyspace notifications are fire-and-forget (a subscriber that reconnects misses events and cannot tell), " +
		"and with several masters a minority's events disagree with the quorum's, so no gap-free ordered stream of grants, releases and expiries can be built"
	ReasonLockDelay = "not implemented: a key whose PX ran out is simply gone on each master, on that master's clock, so no master can tell an expiry from a release; " +
		"a delay would need a second key (PX = TTL + delay) written with every grant and renewal and deleted by release, stretching the bounded-drift assumption Redlock already rests on"
)

// unsupportedReason is the reason redlock gives for lacking f.
func unsupportedReason(f lock.Features) string {
	switch f {
	case lock.FeatureShared:
		return ReasonShared
	case lock.FeatureSemaphore:
		return ReasonSemaphore
	case lock.FeatureMultiKey:
		return ReasonMultiKey
	case lock.FeatureWatch:
		return ReasonWatch
	case lock.FeatureLockDelay:
		return ReasonLockDelay
	}
	return ""
}

// checkSupported refuses options that need a primitive redlock lacks.
func (l *Locker) checkSupported(opts lock.AcquireOptions) error {
	return kit.CheckSupported("redlock", l.Features(), kit.Needs(opts), unsupportedReason)
}
