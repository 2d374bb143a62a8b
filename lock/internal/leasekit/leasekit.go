// Package leasekit carries package lock's constructors of a Lease and a
// Session to lock/kit, which offers them to whoever implements a Locker.
// A Lease's and a Session's deadline state is unexported, so only package
// lock can fill it; lock sets these hooks in its init, and kit (which
// imports lock, so lock's init has run) calls them.
//
// The hooks whose types mention lock's types are typed any: package lock
// imports this package, so this package cannot name lock's types. Each one's
// dynamic type is written beside it, and lock/kit asserts it once, when it
// is initialised.
package leasekit

import "time"

var (
	// DeadlineFor is lock's deadline formula: sent + ttl − drift(ttl,
	// factor), never before sent.
	DeadlineFor func(sent time.Time, ttl time.Duration, factor float64) time.Time

	// InitLease completes a Lease whose exported fields are set and arms
	// its deadline (or puts it in its session):
	//
	//	func(l *lock.Lease, ttl time.Duration, sent time.Time, driftFactor float64, s *lock.Session) *lock.Lease
	InitLease any

	// InitSession completes a Session whose ID and Owner are set and arms
	// its deadline:
	//
	//	func(s *lock.Session, ttl time.Duration, sent time.Time, driftFactor float64) *lock.Session
	InitSession any

	// What a backend records of its answers, on a Lease or Session whose
	// state is lock's:
	//
	//	ExtendLease    func(l *lock.Lease, sent time.Time, ttl time.Duration) bool
	//	MarkWanted     func(l *lock.Lease)
	//	ExtendSession  func(s *lock.Session, sent time.Time) bool
	//	SessionRenewed func(s *lock.Session, sent time.Time, ttl time.Duration) bool
	//	SessionRefused func(s *lock.Session, detail error) error
	//	SessionLeases  func(s *lock.Session, t lock.Token) []*lock.Lease
	ExtendLease, MarkWanted, ExtendSession, SessionRenewed, SessionRefused, SessionLeases any
)
