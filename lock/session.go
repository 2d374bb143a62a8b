package lock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Sessions: many leases kept alive by one keep-alive. A client's
// auto-renewed leases belong to its session, and one renewal of the session
// renews them all, whatever their number: on raftlock one log entry per
// session per renewal interval instead of one per lease (Chubby's and
// etcd's sessions, Hazelcast's CP sessions). A session that ends — its
// keep-alives stop for longer than its TTL, or its client closes it — ends
// every lease in it, and each lease's Done closes.
//
// The deadline rule is the lease's, applied to the session: a session
// lease's deadline is the session's, sent + TTL − Drift(TTL) of the last
// keep-alive (or of the open) that succeeded, sent being when that request
// was sent. A lease acquired in a session does not move the session's
// deadline; it lives at most as long as the session.

// FeatureSessions: the Locker is a SessionLocker, and AcquireOptions.Session
// puts a lease in a session.
const FeatureSessions Features = FeatureLockDelay << 1

func init() {
	featureNames = append(featureNames, struct {
		f    Features
		name string
	}{FeatureSessions, "sessions"})
}

// DefaultSessionTTL is the TTL of a session opened without one (as
// DefaultTTL: 20 s).
const DefaultSessionTTL = DefaultTTL

// ErrSessionExpired: the session is gone (it expired, or was closed) — a
// keep-alive, a close or an acquire in it was refused. It is the Err of
// every lease of a session whose keep-alive was refused, wrapped with
// ErrNotHeld. Returned by SessionLocker methods wrapped with detail.
var ErrSessionExpired = errors.New("lock: session expired")

// ErrTooManySessions: the backend holds as many sessions as its limit
// allows (raftlock: Config.MaxSessions); close one, or wait for one to
// expire.
var ErrTooManySessions = errors.New("lock: too many sessions")

// SessionOptions are a session's settings.
type SessionOptions struct {
	// TTL is how long the session (and every lease in it) lives without a
	// keep-alive: 0 means DefaultSessionTTL; otherwise MinTTL ≤ TTL ≤
	// MaxTTL.
	TTL time.Duration
	// Owner identifies the client; empty means the Locker's own client id.
	// Leases acquired in the session report it as their owner.
	Owner string
	// Identity is the caller's named identity (AcquireOptions.Identity).
	Identity string
}

// SessionLocker is a Locker whose leases can belong to sessions
// (FeatureSessions). Its leases acquired with AcquireOptions.Session live
// as long as that session does.
type SessionLocker interface {
	Locker
	// OpenSession starts a session for opts.TTL, counted from the request.
	OpenSession(ctx context.Context, opts SessionOptions) (*Session, error)
	// RenewSession is one keep-alive: the session (and every lease in it)
	// lives TTL from the request. It returns an error matching
	// ErrSessionExpired, and ends the session, when the backend no longer
	// has it.
	RenewSession(ctx context.Context, s *Session) error
	// CloseSession ends the session and releases every lease in it (their
	// Done close with ErrReleased), in one step where the backend can.
	// Closing a session that is already gone returns an error matching
	// ErrSessionExpired and ends it locally all the same.
	CloseSession(ctx context.Context, s *Session) error
}

// Session is a group of leases kept alive together. Its ID and Owner never
// change; its deadline moves with each successful keep-alive, and
// every lease in it follows. A Session is safe for concurrent use.
type Session struct {
	ID    string
	Owner string

	driftFactor float64

	mu       sync.Mutex
	ttl      time.Duration
	deadline time.Time
	timer    *time.Timer
	done     chan struct{}
	err      error
	// leases are the session's live leases by fencing token (a backend
	// that tells holders they are wanted finds them by it: SessionLeases),
	// several when a backend's tokens count per key, or a grant was
	// copied.
	leases leaseSet
	// noState is the state of the session's leases that have none of
	// their own (Lease.st): it names the session, and nothing writes it.
	noState leaseState
}

// initSession completes a Session whose ID and Owner are set and arms its
// deadline: Done closes with ErrExpired when the deadline passes unless
// a keep-alive moves it first, and every lease in the session ends with it.
// lock/kit's NewSession calls it.
func initSession(s *Session, ttl time.Duration, sent time.Time, driftFactor float64) *Session {
	s.noState.session = s
	s.driftFactor = driftFactor
	s.ttl = ttl
	s.deadline = deadlineFor(sent, ttl, driftFactor)
	s.done = make(chan struct{})
	s.mu.Lock()
	s.armLocked()
	s.mu.Unlock()
	return s
}

// armLocked (re)starts the deadline timer; a deadline already passed ends
// the session from the timer's goroutine at once.
func (s *Session) armLocked() {
	if s.timer != nil {
		s.timer.Stop()
	}
	deadline := s.deadline
	s.timer = time.AfterFunc(time.Until(deadline), func() {
		s.mu.Lock()
		due := s.err == nil && s.deadline.Equal(deadline)
		s.mu.Unlock()
		if due {
			s.End(ErrExpired)
		}
	})
}

// TTL is the session's TTL.
func (s *Session) TTL() time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.ttl
}

// Deadline is the latest instant at which a holder of a lease in the
// session may still act on it (see Lease.Deadline).
func (s *Session) Deadline() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.deadline
}

// Done is closed when the session ends: its deadline passed, a keep-alive
// was refused, or it was closed. Err says which.
func (s *Session) Done() <-chan struct{} { return s.done }

// Err is nil while the session lives, then why it ended.
func (s *Session) Err() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.err
}

// Leases returns how many live leases the session holds.
func (s *Session) Leases() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases.n
}

// extend records a successful keep-alive sent at sent: the session's
// deadline, and every lease's in it, becomes sent + TTL − Drift(TTL). It
// reports false, changing nothing, when the session has already ended.
func (s *Session) extend(sent time.Time) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	d := deadlineFor(sent, s.ttl, s.driftFactor)
	if d.Before(s.deadline) {
		d = s.deadline // a keep-alive answered out of order never shortens it
	}
	s.deadline = d
	s.armLocked()
	s.mu.Unlock()
	return true
}

// renewed records a successful keep-alive sent at sent for which the
// backend reported the session's TTL: when ttl differs from the one the
// Session was built with (a gateway that adopted a session by its id
// alone, and guessed), the Session takes the backend's ttl and its
// deadline becomes sent + ttl − Drift(ttl) even if that is earlier. It
// reports false when the session has already ended.
func (s *Session) renewed(sent time.Time, ttl time.Duration) bool {
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return false
	}
	if ttl > 0 && ttl != s.ttl {
		s.ttl = ttl
		s.deadline = deadlineFor(sent, ttl, s.driftFactor)
	}
	s.mu.Unlock()
	return s.extend(sent)
}

// End ends the session with cause (ErrReleased when it was closed) and
// every lease in it with the same cause. Only the first call has an effect.
func (s *Session) End(cause error) {
	if cause == nil {
		cause = ErrReleased
	}
	s.mu.Lock()
	if s.err != nil {
		s.mu.Unlock()
		return
	}
	s.err = cause
	if s.timer != nil {
		s.timer.Stop()
	}
	close(s.done)
	leases := s.leases.slots
	s.leases = leaseSet{}
	s.mu.Unlock()
	for _, l := range leases {
		if l != nil {
			l.End(cause)
		}
	}
}

// refused ends the session after its backend refused a keep-alive (it no
// longer has the session) and returns the error every lease ends with:
// it matches ErrSessionExpired and ErrNotHeld. lock/kit's SessionRefused
// calls it.
func (s *Session) refused(detail error) error {
	err := fmt.Errorf("%w: %w", ErrNotHeld, ErrSessionExpired)
	if detail != nil && !errors.Is(detail, ErrSessionExpired) {
		err = fmt.Errorf("%w: %w (%v)", ErrNotHeld, ErrSessionExpired, detail)
	}
	s.End(err)
	return err
}

// add puts l in the session; false (l not added) when the session has
// ended.
func (s *Session) add(l *Lease) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.noState.session == nil {
		s.noState.session = s // a Session not made by initSession
	}
	l.st = &s.noState
	if s.err != nil {
		return false
	}
	s.leases.add(l)
	return true
}

// remove takes an ended lease out of the session.
func (s *Session) remove(l *Lease) {
	s.mu.Lock()
	s.leases.remove(l)
	s.mu.Unlock()
}

// withToken returns the session's live leases whose fencing token is t
// (lock/kit's SessionLeases).
func (s *Session) withToken(t Token) []*Lease {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.leases.withToken(t, nil)
}

// KeepSessionAlive renews s through l every TTL/3 until the session ends,
// ctx ends, or l is closed: the session's counterpart of KeepAlive, with
// the same rules. A refused keep-alive ends the session and its leases; a
// transient failure is retried with jittered backoff while the session's
// deadline allows, and past it the deadline ends them. It blocks; run it
// in its own goroutine.
func KeepSessionAlive(ctx context.Context, l SessionLocker, s *Session) {
	ttl := s.TTL()
	backoff := ExponentialBackoff{Base: DefaultBackoffBase, Max: ttl / 10, Jitter: 1}
	wait := func(d time.Duration) bool {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return false
		case <-s.Done():
			return false
		case <-t.C:
			return true
		}
	}
	for {
		if !wait(ttl / 3) {
			return
		}
		for attempt := 1; ; attempt++ {
			rctx, cancel := context.WithDeadline(ctx, s.Deadline())
			err := l.RenewSession(rctx, s)
			cancel()
			if err == nil {
				break
			}
			switch {
			case errors.Is(err, ErrSessionExpired), errors.Is(err, ErrNotHeld):
				s.refused(err)
				return
			case errors.Is(err, ErrClosed), ctx.Err() != nil:
				return
			}
			pause, _ := backoff.Backoff(attempt)
			if !wait(pause) {
				return
			}
		}
	}
}
