package kit

import (
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/internal/leasekit"
)

// What a backend records of its answers on the Leases and Sessions it
// handed out: a renewal, a release, a waiter, a keep-alive. The state they
// move is lock's (see lock/internal/leasekit).
var (
	extendLease    = leasekit.ExtendLease.(func(*lock.Lease, time.Time, time.Duration) bool)
	markWanted     = leasekit.MarkWanted.(func(*lock.Lease))
	extendSession  = leasekit.ExtendSession.(func(*lock.Session, time.Time) bool)
	sessionRenewed = leasekit.SessionRenewed.(func(*lock.Session, time.Time, time.Duration) bool)
	sessionRefused = leasekit.SessionRefused.(func(*lock.Session, error) error)
	sessionLeases  = leasekit.SessionLeases.(func(*lock.Session, lock.Token) []*lock.Lease)
)

// Extend records a successful renewal of l for ttl whose request was sent
// at sent: the deadline becomes DeadlineFor(sent, ttl) — earlier than
// before if the renewal asked for a shorter TTL, since the backend's
// expiry moved there too. It reports false, changing nothing, when the
// lease has already ended: a lease whose Done is closed stays closed.
func Extend(l *lock.Lease, sent time.Time, ttl time.Duration) bool {
	return extendLease(l, sent, ttl)
}

// Renewed records a backend's answer to a renewal of l for ttl whose
// request was sent at sent. held means the backend extended the grant: the
// deadline moves (see Extend). Otherwise the lease ends and the error,
// matching lock.ErrNotHeld, is returned; Renew implementations return
// Renewed's result.
func Renewed(l *lock.Lease, sent time.Time, ttl time.Duration, held bool) error {
	if !held {
		return refused(l)
	}
	if !Extend(l, sent, ttl) {
		return fmt.Errorf("%w: %w", lock.ErrNotHeld, l.Err())
	}
	return nil
}

// Released records a backend's answer to a release of l: held means it
// freed the grant, and the lease ends with lock.ErrReleased; otherwise it
// ends with, and Released returns, an error matching lock.ErrNotHeld.
func Released(l *lock.Lease, held bool) error {
	if !held {
		return refused(l)
	}
	l.End(lock.ErrReleased)
	return nil
}

func refused(l *lock.Lease) error {
	err := fmt.Errorf("%w: %q was released, expired or granted to someone else", lock.ErrNotHeld, l.Key)
	l.End(err)
	return err
}

// MarkWanted records that another contender waits for l's key: l.Wanted
// closes and the AfterWanted callbacks run, on the caller's goroutine,
// after the lease's lock is released. Only the first call on a live lease
// has an effect, and a call on an ended lease has none.
func MarkWanted(l *lock.Lease) { markWanted(l) }

// ExtendSession records a successful keep-alive of s sent at sent: the
// session's deadline, and every lease's in it, becomes DeadlineFor(sent,
// TTL). A keep-alive answered out of order never shortens it. It reports
// false, changing nothing, when the session has already ended.
func ExtendSession(s *lock.Session, sent time.Time) bool { return extendSession(s, sent) }

// SessionRenewed records a successful keep-alive of s sent at sent for
// which the backend reported the session's TTL: when ttl differs from the
// one the Session was built with (a gateway that adopted a session by its
// id alone, and guessed), the Session takes the backend's ttl and its
// deadline becomes DeadlineFor(sent, ttl) even if that is earlier. It
// reports false when the session has already ended.
func SessionRenewed(s *lock.Session, sent time.Time, ttl time.Duration) bool {
	return sessionRenewed(s, sent, ttl)
}

// SessionRefused ends s after its backend refused a keep-alive (it no
// longer has the session) and returns the error every lease ends with:
// it matches lock.ErrSessionExpired and lock.ErrNotHeld.
func SessionRefused(s *lock.Session, detail error) error { return sessionRefused(s, detail) }

// SessionLeases returns the live leases of s whose fencing token is t
// (usually one; more when copies of a grant live in the session). A
// backend that tells holders they are wanted finds the session leases it
// handed out with it, instead of keeping an entry of its own per lease.
func SessionLeases(s *lock.Session, t lock.Token) []*lock.Lease { return sessionLeases(s, t) }
