package client

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Sessions. The Client is a lock.SessionLocker over commands
// 11–13 of docs/protocol.md, and when its gateway offers "sessions" it
// puts the leases it would renew one by one (AcquireOptions zero TTL:
// auto-renewed) in one session of its own instead, kept alive by one
// keep-alive at TTL/3: N such leases cost one renewal per interval, not N.
// Leases with an explicit TTL keep their own renewals. The session is
// opened at the first acquire that needs it; it is the server's, so it
// survives reconnects and leader changes (the keep-alive is re-sent to the
// new leader like any request). When a keep-alive is refused the session
// ends and so does every lease in it (Done closes; Err matches
// lock.ErrSessionExpired and lock.ErrNotHeld); the next acquire opens a
// new one. Close stops the keep-alive without closing the session: its
// leases then run out, as auto-renewed leases do.
//
// A gateway that refuses to open the session — quota_exceeded (the
// caller's identity is at its quota of sessions) or too_many_sessions
// (the connection's or the backend's cap) — never fails an acquire: the
// acquire goes ahead without a session and its lease renews itself
// (with the session's TTL when Options.SessionTTL sets one), as on a
// gateway without sessions. For Options.SessionRetry after a refusal
// acquires go straight to that fallback; the first acquire after it tries
// to open the session again. The client's logger says so at Warn once per
// fallback period (from the first refusal until a session opens again),
// and SessionStats counts the refusals and the acquires that fell back.
// Any other refusal of the open (forbidden, unauthorized, …) fails the
// acquire.

var _ lock.SessionLocker = (*Client)(nil)

// DefaultSessionRetry is how long after a refused open of the client's own
// session its auto-renewed leases renew themselves before an acquire tries
// to open it again (Options.SessionRetry).
const DefaultSessionRetry = 30 * time.Second

// SessionStats counts what became of the client's own session
// (Client.SessionStats).
type SessionStats struct {
	// Opened are the sessions the client opened for its own use.
	Opened uint64
	// Refused are opens of its own session that the gateway refused with
	// quota_exceeded or too_many_sessions.
	Refused uint64
	// Fallbacks are the acquires (Acquire, TryAcquire, AcquireAll,
	// TryAcquireAll) whose leases would have gone into the client's
	// session but were made without one, renewed on their own, because
	// opening the session was refused (now or less than
	// Options.SessionRetry before).
	Fallbacks uint64
	// FallingBack reports whether the client is in a fallback period now:
	// its last open was refused and none has succeeded since.
	FallingBack bool
}

// SessionStats reports what became of the client's own session: zero
// with Options.NoSession, the lease cache, or a gateway without sessions.
func (c *Client) SessionStats() SessionStats {
	o := &c.own
	o.mu.Lock()
	falling := o.fallingBack
	o.mu.Unlock()
	return SessionStats{Opened: o.opened.Load(), Refused: o.refused.Load(), Fallbacks: o.fallbacks.Load(), FallingBack: falling}
}

// ownSession is the client's own session (Options.NoSession off).
type ownSession struct {
	mu      sync.Mutex
	s       *lock.Session // the live one, or nil (none yet, or ended)
	opening chan struct{} // closed when an open in flight finishes
	stop    func()        // stops the current session's keep-alive

	// refusal is the error of the last open, refused (sessionRefused),
	// and retryAt when an acquire may try again; fallingBack is set from
	// that refusal until a session opens (the Warn is logged once per
	// period).
	refusal     error
	retryAt     time.Time
	fallingBack bool

	opened, refused, fallbacks atomic.Uint64
}

// sessionRefused reports whether err is a gateway's refusal to open a
// session that the client's acquires fall back from: the caller's quota
// of sessions, or the connection's or the backend's cap. A refusal for
// any other reason (forbidden, unauthorized) is the acquire's error too.
func sessionRefused(err error) bool {
	return errors.Is(err, lock.ErrQuotaExceeded) || errors.Is(err, lock.ErrTooManySessions)
}

// outsideSession is opts (an auto-renewed acquire's: zero TTL) for a lease
// that would have gone into the client's session and renews itself
// instead: with the session's TTL when Options.SessionTTL sets one, so
// that it outlives a stopped client by as long as the session's leases
// would have.
func (c *Client) outsideSession(opts lock.AcquireOptions) lock.AcquireOptions {
	opts.Session = nil
	if c.opts.SessionTTL > 0 && opts.TTL == 0 {
		opts.TTL, opts.AutoRenew = c.opts.SessionTTL, true
	}
	return opts
}

// wantsSession reports whether an acquire with opts (as the caller gave
// them) goes into the client's own session: auto-renewed (zero TTL), no
// session of the caller's, sessions not turned off (NoSession, or the
// lease cache, which keeps and renews leases of its own), and the gateway
// offers them.
func (c *Client) wantsSession(opts lock.AcquireOptions) bool {
	return opts.Session == nil && opts.TTL == 0 && !c.opts.NoSession && c.cache == nil &&
		c.Features()&lock.FeatureSessions != 0
}

// withOwnSession runs an acquire with opts, in the client's own session
// when it should go there (wantsSession). When the gateway answers that
// the session is gone (it expired on the server before our keep-alive
// noticed), the session ends here — and every lease in it — and the
// acquire is made once more in a new one.
func withOwnSession[T any](c *Client, ctx context.Context, opts lock.AcquireOptions, acquire func(lock.AcquireOptions) (T, error)) (T, error) {
	if !c.wantsSession(opts) {
		return acquire(opts)
	}
	for attempt := 0; ; attempt++ {
		s, err := c.ownSessionFor(ctx)
		switch {
		case errors.Is(err, lock.ErrUnsupported):
			return acquire(c.outsideSession(opts)) // a gateway without sessions after all: renew one by one
		case sessionRefused(err):
			// The gateway refused the session (now, or within
			// SessionRetry): the lease renews itself.
			c.own.fallbacks.Add(1)
			return acquire(c.outsideSession(opts))
		case err != nil:
			var zero T
			return zero, err
		}
		opts.Session = s
		got, err := acquire(opts)
		if errors.Is(err, lock.ErrUnsupported) {
			// The cluster stopped offering sessions (a format downgrade
			// drains them): this lease is renewed on its own, and the
			// session, with whatever it still holds, lives on until
			// those are released.
			return acquire(c.outsideSession(opts))
		}
		if attempt == 0 && errors.Is(err, lock.ErrSessionExpired) {
			kit.SessionRefused(s, err)
			continue
		}
		return got, err
	}
}

// ownSessionFor returns the client's live session, opening it (once, for
// every caller waiting) when there is none. Within Options.SessionRetry of
// a refused open it returns that refusal without asking again.
func (c *Client) ownSessionFor(ctx context.Context) (*lock.Session, error) {
	o := &c.own
	for {
		o.mu.Lock()
		if s := o.s; s != nil && s.Err() == nil {
			o.mu.Unlock()
			return s, nil
		}
		if o.refusal != nil && time.Now().Before(o.retryAt) {
			err := o.refusal
			o.mu.Unlock()
			return nil, err
		}
		if ch := o.opening; ch != nil {
			o.mu.Unlock()
			select {
			case <-ch:
				continue
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		ch := make(chan struct{})
		o.opening = ch
		o.mu.Unlock()
		s, err := c.OpenSession(ctx, lock.SessionOptions{TTL: c.opts.SessionTTL})
		o.mu.Lock()
		o.opening = nil
		close(ch)
		if err != nil {
			if !sessionRefused(err) {
				o.mu.Unlock()
				return nil, err
			}
			o.refusal, o.retryAt = err, time.Now().Add(c.opts.SessionRetry)
			first := !o.fallingBack
			o.fallingBack = true
			o.mu.Unlock()
			o.refused.Add(1)
			if first {
				c.log.Warn("lockgate client: the gateway refused the client's session; auto-renewed leases renew themselves one by one until it opens",
					"err", err, "retry_in", c.opts.SessionRetry)
			} else {
				c.log.Debug("lockgate client: the gateway refused the client's session again", "err", err, "retry_in", c.opts.SessionRetry)
			}
			return nil, err
		}
		o.opened.Add(1)
		if o.fallingBack {
			c.log.Info("lockgate client: the client's session opened after refusals; auto-renewed leases go into it again")
		}
		o.refusal, o.fallingBack = nil, false
		kctx, cancel := context.WithCancel(c.ctx)
		if o.stop != nil {
			o.stop()
		}
		o.s, o.stop = s, cancel
		o.mu.Unlock()
		go func() {
			defer cancel()
			lock.KeepSessionAlive(kctx, c, s)
		}()
		return s, nil
	}
}

// OpenSession implements lock.SessionLocker: command 11. The session's
// deadline counts from the send of the answered request.
func (c *Client) OpenSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, error) {
	if !c.enter() {
		return nil, lock.ErrClosed
	}
	defer c.leave()
	if opts.Owner == "" {
		opts.Owner = c.opts.ClientID
	}
	if err := kit.ValidateSessionOptions(opts); err != nil {
		return nil, err
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	k := &call{op: "open-session", req: wire.Request{CommandType: wire.CmdOpenSession, ClientID: opts.Owner, TTL: ms(opts.TTL)}}
	r, err := c.do(ctx, octx, k)
	if err != nil {
		return nil, err
	}
	if r.Type != wire.TypeSession {
		return nil, unexpected(r, "", wire.TypeSession)
	}
	if r.SessionID == "" || r.TTL <= 0 {
		return nil, fmt.Errorf("lockgate client: open-session: answer without sessionId or ttl: %w", lock.ErrUnavailable)
	}
	return kit.NewSession(kit.SessionGrant{ID: r.SessionID, Owner: opts.Owner,
		TTL: time.Duration(r.TTL) * time.Millisecond, Sent: k.last}), nil
}

// RenewSession implements lock.SessionLocker: command 12, re-sent across
// reconnects and leader changes until ctx ends. It carries the session's
// ttl too, so that a gateway that has not seen the session (a new leader's)
// knows it.
func (c *Client) RenewSession(ctx context.Context, s *lock.Session) error {
	if !c.enter() {
		return lock.ErrClosed
	}
	defer c.leave()
	if s == nil {
		return fmt.Errorf("lockgate client: renew-session: nil session: %w", lock.ErrSessionExpired)
	}
	if err := s.Err(); err != nil {
		return fmt.Errorf("%w: %w", lock.ErrSessionExpired, err)
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	k := &call{op: "renew-session", req: wire.Request{CommandType: wire.CmdRenewSession, SessionID: s.ID, TTL: ms(s.TTL())}}
	r, err := c.do(ctx, octx, k)
	if err != nil {
		return err
	}
	switch {
	case r.Type == wire.TypeSessionRenewed:
		if !kit.ExtendSession(s, k.last) {
			return fmt.Errorf("lockgate client: renew-session: %w: %w", lock.ErrSessionExpired, s.Err())
		}
		return nil
	case r.code() == wire.CodeSessionExpired:
		return kit.SessionRefused(s, replyError(r, ""))
	}
	return unexpected(r, "", wire.TypeSessionRenewed)
}

// CloseSession implements lock.SessionLocker: command 13. Every lease of
// the session ends with lock.ErrReleased; a session already gone on the
// server ends here too, and the error matches lock.ErrSessionExpired.
func (c *Client) CloseSession(ctx context.Context, s *lock.Session) error {
	if !c.enter() {
		return lock.ErrClosed
	}
	defer c.leave()
	if s == nil {
		return fmt.Errorf("lockgate client: close-session: nil session: %w", lock.ErrSessionExpired)
	}
	octx, cancel := c.opCtx(ctx)
	defer cancel()
	k := &call{op: "close-session", req: wire.Request{CommandType: wire.CmdCloseSession, SessionID: s.ID}}
	r, err := c.do(ctx, octx, k)
	if err != nil {
		return err
	}
	switch {
	case r.Type == wire.TypeSessionClosed:
		s.End(lock.ErrReleased)
		return nil
	case r.code() == wire.CodeSessionExpired:
		return kit.SessionRefused(s, replyError(r, ""))
	}
	return unexpected(r, "", wire.TypeSessionClosed)
}

// renewInSession is Renew of a lease in a session: one keep-alive of its
// session, which moves every lease in it.
func (c *Client) renewInSession(ctx context.Context, lease *lock.Lease) error {
	s := lease.Session()
	if err := lease.Err(); err != nil {
		return fmt.Errorf("lockgate client: renew %q: %w: %w", lease.Key, lock.ErrNotHeld, err)
	}
	err := c.RenewSession(ctx, s)
	if errors.Is(err, lock.ErrSessionExpired) && !errors.Is(err, lock.ErrNotHeld) {
		err = fmt.Errorf("%w: %w", lock.ErrNotHeld, err)
	}
	return err
}

// stopOwnSession stops the keep-alive of the client's own session (Close:
// its leases run out; tests: a keep-alive that stops).
func (c *Client) stopOwnSession() {
	c.own.mu.Lock()
	stop := c.own.stop
	c.own.stop = nil
	c.own.mu.Unlock()
	if stop != nil {
		stop()
	}
}

// sessionLease turns a grant of an acquire in a session into a Lease of
// that session: its TTL and deadline are the session's, and no keep-alive
// of its own runs. A grant that does not name the session (a gateway that
// ignored sessionId) is released and refused: its lease would expire on
// the server while the session's keep-alive made it look alive here.
func (c *Client) sessionLease(r wire.Grant, key, owner string, token lock.Token, opts lock.AcquireOptions) (*lock.Lease, error) {
	s := opts.Session
	if r.SessionID != s.ID {
		c.releaseRaced(nil, &reply{Reply: wire.Reply{Key: key, LockToken: r.LockToken, FencingToken: r.FencingToken}})
		return nil, fmt.Errorf("lockgate client: acquire %q: the grant is not in the session it was asked for (sessionId %q): %w", key, r.SessionID, lock.ErrUnavailable)
	}
	mode := opts.Mode
	if m, err := lock.ParseMode(r.Mode); r.Mode != "" && err == nil {
		mode = m
	}
	permits := opts.Permits
	if r.Permits != 0 {
		permits = r.Permits
	}
	lease := kit.NewLease(kit.Grant{Key: key, Owner: owner, Token: token, Handle: r.LockToken, Value: opts.Value,
		Mode: mode, Permits: permits, Session: s})
	if err := lease.Err(); err != nil {
		// The session ended while the grant was on its way: so did the
		// lease on the server.
		return nil, fmt.Errorf("lockgate client: acquire %q: %w: %w", key, lock.ErrSessionExpired, err)
	}
	if r.Wanted {
		kit.MarkWanted(lease)
	}
	c.track(lease)
	return lease, nil
}
