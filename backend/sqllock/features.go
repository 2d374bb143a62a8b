package sqllock

import (
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// The primitives beyond the mutex (lock.Features). sqllock offers shared locks and
// semaphores (shared.go) with one FIFO queue of waiters across modes and
// Lockers (queue.go), multi-key acquires (multi.go) and lock-delay (the
// takeover condition of acquire.sql); it refuses watches, and the
// combinations below, before any statement is sent (lock.ErrUnsupported,
// with the reasons below).

var (
	_ lock.FeatureReporter = (*Locker)(nil)
	_ lock.MultiLocker     = (*Locker)(nil)
)

// features are the primitives this Locker offers.
const features = lock.FeatureShared | lock.FeatureSemaphore | lock.FeatureMultiKey | lock.FeatureLockDelay

// Features implements lock.FeatureReporter: shared locks, semaphores,
// multi-key acquires and lock-delay.
func (l *Locker) Features() lock.Features { return features }

// Reasons for what sqllock does not offer, as docs/backends.md quotes them.
const (
	ReasonWatch = "not offered: NOTIFY reaches only connected listeners and carries no sequence number, so a listener that reconnects misses changes " +
		"and cannot tell; a gap-free ordered stream needs a change log written by every grant and release and, for expiries (which no statement " +
		"makes), by a sweeper, and a watcher that reads the log from its last revision; none of that is built"
	ReasonSharedLockDelay = "not implemented for shared locks and semaphores: the delay would have to start when the last shared holder expires, " +
		"which the shared rows do not record; exclusive locks have it"
	ReasonMultiShared = "not implemented: multi-key acquires take exclusive locks only (a shared multi-key grant would have to queue on several keys at once)"
)

// unsupportedReason is the reason sqllock gives for lacking f.
func unsupportedReason(f lock.Features) string {
	if f == lock.FeatureWatch {
		return ReasonWatch
	}
	return ""
}

// checkSupported refuses options that need a primitive sqllock lacks.
func (l *Locker) checkSupported(opts lock.AcquireOptions) error {
	return kit.CheckSupported("sqllock", features, kit.Needs(opts), unsupportedReason)
}
