package sqllock

import "github.com/lockgate/lockgate/lock"

// Issue 22's primitives (lock.Features). sqllock offers multi-key acquires
// (multi.go) and lock-delay (the takeover condition of acquire.sql); it
// refuses shared locks, semaphores and watches before any statement is
// sent (lock.ErrUnsupported, with the reasons below).

var (
	_ lock.FeatureReporter = (*Locker)(nil)
	_ lock.MultiLocker     = (*Locker)(nil)
)

// features are the primitives this Locker offers.
const features = lock.FeatureMultiKey | lock.FeatureLockDelay

// Features implements lock.FeatureReporter: multi-key acquires and
// lock-delay.
func (l *Locker) Features() lock.Features { return features }

// Reasons for the primitives sqllock does not offer, as docs/backends.md
// quotes them.
const (
	ReasonShared = "not implemented: a read-write lock needs several holder rows per key and one FIFO queue of both modes shared by every Locker of the table " +
		"(waiter rows with a ticket from a sequence, kept alive by their waiters), so that a waiting writer is not starved by later readers; " +
		"sqllock keeps one row per key and orders waiters only within a Locker, so it would starve writers"
	ReasonSemaphore = "not implemented: N permits need N holder rows per key (and the FIFO queue of a read-write lock); the table keeps one row per key"
	ReasonWatch     = "not offered: NOTIFY reaches only connected listeners and carries no sequence number, so a listener that reconnects misses changes " +
		"and cannot tell; a gap-free ordered stream needs a change log written by every grant and release and, for expiries (which no statement " +
		"makes), by a sweeper, and a watcher that reads the log from its last revision; none of that is built"
)

// unsupportedReason is the reason sqllock gives for lacking f.
func unsupportedReason(f lock.Features) string {
	switch f {
	case lock.FeatureShared:
		return ReasonShared
	case lock.FeatureSemaphore:
		return ReasonSemaphore
	case lock.FeatureWatch:
		return ReasonWatch
	}
	return ""
}

// checkSupported refuses options that need a primitive sqllock lacks.
func (l *Locker) checkSupported(opts lock.AcquireOptions) error {
	return lock.CheckSupported("sqllock", features, opts.Needs(), unsupportedReason)
}
