package raftlock

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Sessions (lock.SessionLocker, docs/raftlock.md "Sessions"): a session is
// replicated in the state machine, so it survives leader changes; a lease
// acquired in it lives as long as it does, and one OpSessionRenew entry
// renews all of them. The leader tracks each session's expiry on its heap
// (one item per session, none per session lease) and ends an expired
// session with one OpSessionExpire, which expires every lease of it.

var (
	_ lock.SessionLocker = (*Session)(nil)
	_ lock.SessionLocker = (*Node)(nil)
	_ lock.SessionLocker = (*clusterLocker)(nil)
)

// features is what raftlock offers: every primitive, sessions, and watches
// of a prefix (the web console's event stream).
const features = lock.AllFeatures | lock.FeatureSessions | lock.FeatureWatchPrefix

// ErrTooManySessions is returned by OpenSession when the cluster holds
// Config.MaxSessions sessions. It matches lock.ErrTooManySessions.
var ErrTooManySessions = fmt.Errorf("raftlock: %w", lock.ErrTooManySessions)

// OpenSession implements lock.SessionLocker.
func (s *Session) OpenSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	if s.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	if err := kit.ValidateSessionOptions(opts); err != nil {
		return nil, err
	}
	if opts.TTL == 0 {
		opts.TTL = lock.DefaultSessionTTL
	}
	if opts.Owner == "" {
		opts.Owner = s.clientID
	}
	if n := s.n.fsm.NumSessions(); n >= s.n.cfg.MaxSessions {
		return nil, fmt.Errorf("%w: %d open, the limit (Config.MaxSessions)", ErrTooManySessions, n)
	}
	id := lock.NewHandle()
	open := fsm.Op{Type: fsm.OpSessionOpen, Key: id, Owner: fsm.TagOwner(opts.Identity, opts.Owner), TTL: opts.TTL}
	if err := s.n.batch.admit(open); err != nil {
		return nil, err
	}
	sent := time.Now()
	res, err := s.n.applyCtx(ctx, open)
	if err != nil {
		return nil, err
	}
	if st := res.Results[0].Status; st != fsm.StatusOK {
		return nil, fmt.Errorf("raftlock: open session refused by the state machine (status %s)", st)
	}
	return kit.NewSession(kit.SessionGrant{ID: id, Owner: opts.Owner, TTL: opts.TTL, Sent: sent}), nil
}

// RenewSession implements lock.SessionLocker: one entry, whatever the
// number of the session's leases.
func (s *Session) RenewSession(ctx context.Context, sess *lock.Session) error {
	if err := s.checkSession(sess); err != nil {
		return err
	}
	if err := s.n.drainRefuses(sess.ID); err != nil {
		return kit.SessionRefused(sess, err)
	}
	sent := time.Now()
	res, err := s.n.applyCtx(ctx, fsm.Op{Type: fsm.OpSessionRenew, Key: sess.ID})
	if err != nil {
		return err
	}
	if res.Results[0].Status != fsm.StatusOK {
		return kit.SessionRefused(sess, nil)
	}
	// The state machine's TTL is the session's: a Session rebuilt from
	// its id alone (a gateway adopting it after a leader change) learns
	// it here.
	ttl := sess.TTL()
	if si, ok := s.n.fsm.Session(sess.ID); ok {
		ttl = si.TTL
	}
	if !kit.SessionRenewed(sess, sent, ttl) {
		return fmt.Errorf("%w: %w", lock.ErrSessionExpired, sess.Err())
	}
	return nil
}

// CloseSession implements lock.SessionLocker: one entry releases every
// lease of the session; their keys go to their next waiters.
func (s *Session) CloseSession(ctx context.Context, sess *lock.Session) error {
	if err := s.checkSession(sess); err != nil {
		return err
	}
	res, err := s.n.applyCtx(ctx, fsm.Op{Type: fsm.OpSessionClose, Key: sess.ID})
	if err != nil {
		return err
	}
	if res.Results[0].Status != fsm.StatusOK {
		return kit.SessionRefused(sess, nil)
	}
	sess.End(lock.ErrReleased)
	return nil
}

func (s *Session) checkSession(sess *lock.Session) error {
	switch {
	case s.ctx.Err() != nil:
		return lock.ErrClosed
	case sess == nil || sess.ID == "":
		return fmt.Errorf("%w: no session", lock.ErrSessionExpired)
	case len(sess.ID) > fsm.MaxSessionLen:
		return &lock.ValidationError{Field: "session", Value: fmt.Sprintf("(%d bytes)", len(sess.ID)),
			Reason: fmt.Sprintf("is longer than the maximum of %d bytes", fsm.MaxSessionLen), Err: lock.ErrSessionExpired}
	}
	return nil
}

// OpenSession implements lock.SessionLocker (the node's default Session).
func (n *Node) OpenSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	return n.session.OpenSession(ctx, opts)
}

// RenewSession implements lock.SessionLocker.
func (n *Node) RenewSession(ctx context.Context, sess *lock.Session) error {
	return n.session.RenewSession(ctx, sess)
}

// CloseSession implements lock.SessionLocker.
func (n *Node) CloseSession(ctx context.Context, sess *lock.Session) error {
	return n.session.CloseSession(ctx, sess)
}

// OpenSession implements lock.SessionLocker through whichever node leads;
// the session is kept alive here (lock.KeepSessionAlive) until it ends or
// the Locker closes.
func (cl *clusterLocker) OpenSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	var sess *lock.Session
	err := cl.retry(ctx, func(ctx context.Context, n *Node) error {
		var err error
		sess, err = n.OpenSession(ctx, opts)
		return err
	})
	if err == nil {
		go lock.KeepSessionAlive(cl.ctx, cl, sess)
	}
	return sess, err
}

// RenewSession implements lock.SessionLocker.
func (cl *clusterLocker) RenewSession(ctx context.Context, sess *lock.Session) error {
	return cl.retry(ctx, func(ctx context.Context, n *Node) error { return n.RenewSession(ctx, sess) })
}

// CloseSession implements lock.SessionLocker.
func (cl *clusterLocker) CloseSession(ctx context.Context, sess *lock.Session) error {
	return cl.retry(ctx, func(ctx context.Context, n *Node) error { return n.CloseSession(ctx, sess) })
}

// sessionErr is the error of an acquire refused because its session is
// gone.
func sessionErr(key string, sess *lock.Session) error {
	err := fmt.Errorf("raftlock: acquire %q: %w", key, lock.ErrSessionExpired)
	if sess != nil {
		kit.SessionRefused(sess, nil)
	}
	return err
}

// isSessionGone reports whether err says a session is gone.
func isSessionGone(err error) bool { return errors.Is(err, lock.ErrSessionExpired) }
