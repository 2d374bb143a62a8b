package kit

import (
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/internal/leasekit"
)

// DeadlineFor returns the latest instant at which a holder may still believe
// it holds a lease granted for ttl by a request sent at sent:
//
//	sent + ttl − lock.Drift(ttl, factor)
//
// sent must carry a monotonic clock reading (time.Now does), so that the
// deadline is immune to wall-clock jumps on the holder. A ttl smaller than its
// drift gives sent itself: such a lease is over as soon as it is granted.
// It is the deadline of a Lease built by NewLease (lock.Lease.Deadline).
func DeadlineFor(sent time.Time, ttl time.Duration, factor float64) time.Time {
	return leasekit.DeadlineFor(sent, ttl, factor)
}

// Grant is what a backend knows when it hands out a lease; NewLease turns it
// into a lock.Lease.
type Grant struct {
	Key    string
	Owner  string
	Token  lock.Token
	Handle string // the backend's secret identity of this grant (see lock.Lease.Handle)
	Value  []byte
	TTL    time.Duration
	// Mode and Permits are how the key is held (see lock.AcquireOptions).
	Mode    lock.Mode
	Permits int
	// Sent is an instant, on the holder's monotonic clock, that precedes the
	// start of the backend's TTL for this grant: normally the moment the
	// granting request was sent.
	Sent time.Time
	// DriftFactor overrides lock.DefaultDriftFactor when positive.
	DriftFactor float64
	// Session, when not nil, is the session the lease belongs to: TTL is
	// the session's, the deadline is the session's and follows its
	// keep-alives, and the lease ends when the session does (Sent is then
	// unused).
	Session *lock.Session
}

// The constructors package lock hands over (see lock/internal/leasekit);
// lock's init has run before this package's variables are initialised.
var (
	initLease   = leasekit.InitLease.(func(*lock.Lease, time.Duration, time.Time, float64, *lock.Session) *lock.Lease)
	initSession = leasekit.InitSession.(func(*lock.Session, time.Duration, time.Time, float64) *lock.Session)
)

// NewLease builds a Lease from a grant and arms its deadline: Done closes
// with lock.ErrExpired when the deadline passes unless the lease is extended
// first. Backends call it on every grant; a gateway calls it to rebuild a
// lease from (Key, Owner, Token, Handle) a client sent (a lease is
// identified by those fields, never by pointer).
func NewLease(g Grant) *lock.Lease {
	return initLease(&lock.Lease{
		Key:     g.Key,
		Owner:   g.Owner,
		Token:   g.Token,
		Handle:  g.Handle,
		Value:   g.Value,
		Mode:    g.Mode,
		Permits: g.Permits,
	}, g.TTL, g.Sent, g.DriftFactor, g.Session)
}

// SessionGrant is what a backend knows when it opens a session; NewSession
// turns it into a lock.Session.
type SessionGrant struct {
	// ID is the backend's secret identity of the session (a random value
	// of at least 128 bits): whoever knows it can renew and close the
	// session. Treat it like a lease handle.
	ID    string
	Owner string
	TTL   time.Duration
	// Sent precedes the start of the backend's TTL (see Grant.Sent).
	Sent        time.Time
	DriftFactor float64
}

// NewSession builds a Session from a grant and arms its deadline: Done
// closes with lock.ErrExpired when the deadline passes unless Extend moves
// it first, and every lease in the session ends with it.
func NewSession(g SessionGrant) *lock.Session {
	return initSession(&lock.Session{ID: g.ID, Owner: g.Owner}, g.TTL, g.Sent, g.DriftFactor)
}
