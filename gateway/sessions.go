package gateway

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Sessions over the protocols: openSession (11), renewSession
// (12), closeSession (13), REST /sessions, and acquires that put their
// leases in a session (sessionId). A session is the backend's
// (lock.SessionLocker): it outlives the connection that opened it and ends
// by its TTL unless renewed or closed. The gateway keeps the lock.Session
// of every session it has served by id (sessionTable), so that an acquire
// or a keep-alive naming it finds it without a round trip; a session it
// does not know (opened through another gateway, before a leader change)
// is adopted by one keep-alive that proves the backend has it.

// DefaultMaxSessionsPerConn bounds the sessions one WebSocket connection
// has opened and not closed (nor seen end); one more is refused with
// too_many_sessions. Sessions outlive their connection, which does not
// give its count back: a client that reconnects starts a new count, and
// the sessions left behind end by their TTL.
const DefaultMaxSessionsPerConn = 64

// sessionTable is the gateway's sessions by id. An entry whose session has
// ended is dropped when found, and by a sweep each time the table has
// doubled since the last one.
type sessionTable struct {
	mu    sync.Mutex
	m     map[string]sessionEntry
	sweep int // the table's size after the last sweep
}

// sessionEntry is a session of the table; adopted when the gateway did
// not open it, and so knows its TTL only from the client's word.
type sessionEntry struct {
	s       *lock.Session
	adopted bool
}

func newSessionTable() *sessionTable { return &sessionTable{m: map[string]sessionEntry{}} }

// get returns the live session of id, or nil.
func (t *sessionTable) get(id string) *lock.Session {
	e := t.entry(id)
	return e.s
}

// entry returns the live entry of id, or the zero entry.
func (t *sessionTable) entry(id string) sessionEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.m[id]
	if e.s != nil && e.s.Err() != nil {
		delete(t.m, id)
		return sessionEntry{}
	}
	return e
}

// put records s (replacing an ended entry of its id).
func (t *sessionTable) put(s *lock.Session, adopted bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.m[s.ID] = sessionEntry{s: s, adopted: adopted}
	if len(t.m) >= 2*max(t.sweep, 64) {
		for id, e := range t.m {
			if e.s.Err() != nil {
				delete(t.m, id)
			}
		}
		t.sweep = len(t.m)
	}
}

func (t *sessionTable) drop(s *lock.Session) {
	t.mu.Lock()
	if t.m[s.ID].s == s {
		delete(t.m, s.ID)
	}
	t.mu.Unlock()
}

// len is how many sessions the table holds (ended ones not yet dropped
// among them).
func (t *sessionTable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.m)
}

// sessionLocker is the gateway's Locker as a SessionLocker, or an
// unsupported error (checked before the backend sees the request).
func (g *Gateway) sessionLocker() (lock.SessionLocker, *apiError) {
	sl, err := g.sessionLockerErr()
	if err != nil {
		return nil, toAPIError(err)
	}
	return sl, nil
}

// sessionLockerErr is sessionLocker with the lock package's error.
func (g *Gateway) sessionLockerErr() (lock.SessionLocker, error) {
	if err := kit.CheckSupported(g.backend, g.Features(), lock.FeatureSessions, nil); err != nil {
		return nil, err
	}
	return g.tl, nil // featuresOf checked the backend's interface
}

// sessionKeeper is sessionLocker for what keeps up or ends a session that
// exists (a keep-alive, a close): the Locker's interface is enough,
// whatever it offers to new sessions now. A backend that stops offering
// sessions (raftlock while a format downgrade drains them) still keeps and
// ends those it has; refusing their keep-alives here would lose their
// leases.
func (g *Gateway) sessionKeeper() (lock.SessionLocker, *apiError) {
	sl, err := g.sessionKeeperErr()
	if err != nil {
		return nil, toAPIError(err)
	}
	return sl, nil
}

func (g *Gateway) sessionKeeperErr() (lock.SessionLocker, error) {
	if _, ok := g.l.(lock.SessionLocker); ok {
		return g.tl, nil
	}
	return nil, &lock.UnsupportedError{Backend: g.backend, Feature: lock.FeatureSessions}
}

// checkSessionID refuses a missing or malformed session id before the
// backend sees it: a session id is what lock.NewHandle makes (32 to 64
// lowercase hex characters), as a lock token is.
func checkSessionID(id string) *apiError {
	if id == "" {
		return newError(wire.CodeMissingField, "sessionId is required")
	}
	if !isHex(id, lock.MinHandleLen, lock.MaxHandleLen) {
		return newError(wire.CodeInvalidHandle, fmt.Sprintf("sessionId must be %d to %d lowercase hex characters, as the session's open answered it", lock.MinHandleLen, lock.MaxHandleLen))
	}
	return nil
}

func isHex(s string, minLen, maxLen int) bool {
	if len(s) < minLen || len(s) > maxLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// openSession opens a session with opts, which sessionOptions checked.
func (g *Gateway) openSession(ctx context.Context, opts lock.SessionOptions) (*lock.Session, *apiError) {
	sl, aerr := g.sessionLocker()
	if aerr != nil {
		return nil, aerr
	}
	s, err := sl.OpenSession(ctx, opts)
	if err != nil {
		return nil, toAPIError(err)
	}
	g.sessions.put(s, false)
	return s, nil
}

// session returns the live session of id: the table's, or one adopted
// by a keep-alive when the gateway does not know it (opened through
// another gateway, or before a leader change). An adopted session starts
// with ttl when the request named one, else lock.DefaultSessionTTL; a
// backend that knows the session's TTL corrects it with the adopting
// keep-alive's answer (kit.SessionRenewed: raftlock does).
func (g *Gateway) session(ctx context.Context, id string, ttl time.Duration) (*lock.Session, error) {
	if s := g.sessions.get(id); s != nil {
		return s, nil
	}
	sl, err := g.sessionKeeperErr()
	if err != nil {
		return nil, err
	}
	if ttl <= 0 {
		ttl = lock.DefaultSessionTTL
	}
	s := kit.NewSession(kit.SessionGrant{ID: id, TTL: ttl, Sent: time.Now()})
	if err := sl.RenewSession(ctx, s); err != nil {
		s.End(err)
		return nil, err
	}
	g.sessions.put(s, true)
	return s, nil
}

// renewSession is one keep-alive of id; ttl, when not 0, is the client's
// word for the session's TTL, used if the gateway must adopt it.
func (g *Gateway) renewSession(ctx context.Context, id string, ttl time.Duration) (*lock.Session, error) {
	if s := g.sessions.get(id); s != nil {
		sl, err := g.sessionKeeperErr()
		if err != nil {
			return nil, err
		}
		if err := sl.RenewSession(ctx, s); err != nil {
			return nil, err
		}
		g.metrics.sessionRenews.Inc()
		return s, nil
	}
	s, err := g.session(ctx, id, ttl) // adopting it renews it
	if err == nil {
		g.metrics.sessionRenews.Inc()
	}
	return s, err
}

// closeSession ends id and every lease in it.
func (g *Gateway) closeSession(ctx context.Context, id string) error {
	sl, err := g.sessionKeeperErr()
	if err != nil {
		return err
	}
	s := g.sessions.get(id)
	if s == nil {
		// Not ours: a Session of the id is enough for the backend, which
		// knows its own; the TTL is only its local deadline.
		s = kit.NewSession(kit.SessionGrant{ID: id, TTL: lock.DefaultSessionTTL, Sent: time.Now()})
	}
	err = sl.CloseSession(ctx, s)
	g.sessions.drop(s)
	return err
}

// sessionAcquire resolves the session an acquire names into opts (on the
// worker: adopting an unknown session takes a round trip) and checks the
// options with it: a ttl other than the session's is invalid_ttl, a
// session that is gone session_expired.
//
// A session the gateway adopted has the TTL the client named when it was
// adopted (the backend keeps the real one): an acquire naming another is
// not refused here, and its lease takes the backend's.
func (g *Gateway) sessionAcquire(ctx context.Context, id string, key string, opts *lock.AcquireOptions) error {
	if id == "" {
		return nil
	}
	if e := g.sessions.entry(id); e.adopted && opts.TTL != 0 && opts.TTL != e.s.TTL() {
		opts.TTL = 0
	}
	s, err := g.session(ctx, id, opts.TTL)
	if err != nil {
		return err
	}
	opts.Session, opts.AutoRenew = s, false
	if _, err := kit.Normalize(*opts, key, "gateway"); err != nil {
		return err
	}
	return nil
}

// WebSocket commands 11–13.

// openSessionWS serves command 11: {ttl, clientId}.
func (c *conn) openSessionWS(req wire.Request) {
	if _, aerr := c.g.sessionLocker(); aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	opts, aerr := sessionOptions(req.TTL, req.ClientID, c.owner)
	if aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	c.mu.Lock()
	n := c.openingSessions
	for id, s := range c.sessions {
		if s.Err() != nil {
			delete(c.sessions, id)
		}
	}
	n += len(c.sessions)
	full := n >= c.g.opts.MaxSessionsPerConn
	if !full {
		c.openingSessions++
	}
	c.mu.Unlock()
	if full {
		c.fail(req.ID, newError(wire.CodeTooManySessions,
			fmt.Sprintf("this connection has %d sessions open, the maximum (close some first)", c.g.opts.MaxSessionsPerConn)))
		return
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		s, aerr := c.g.openSession(ctx, opts)
		c.mu.Lock()
		c.openingSessions--
		if aerr == nil && c.sessions != nil {
			c.sessions[s.ID] = s
		}
		c.mu.Unlock()
		if aerr != nil {
			c.fail(req.ID, aerr)
			return
		}
		c.send(wire.Reply{ID: req.ID, Type: wire.TypeSession, Success: true, SessionID: s.ID, TTL: durationMS(s.TTL())})
	})
}

// renewSessionWS serves command 12: {sessionId}.
func (c *conn) renewSessionWS(req wire.Request) {
	c.sessionCall(req, func(ctx context.Context) (wire.Reply, error) {
		s, err := c.g.renewSession(ctx, req.SessionID, positiveTTL(req.TTL))
		if err != nil {
			return wire.Reply{}, err
		}
		return wire.Reply{ID: req.ID, Type: wire.TypeSessionRenewed, Success: true, SessionID: s.ID, TTL: durationMS(s.TTL())}, nil
	})
}

// closeSessionWS serves command 13: {sessionId}.
func (c *conn) closeSessionWS(req wire.Request) {
	c.sessionCall(req, func(ctx context.Context) (wire.Reply, error) {
		err := c.g.closeSession(ctx, req.SessionID)
		c.mu.Lock()
		if c.sessions != nil {
			delete(c.sessions, req.SessionID)
		}
		c.mu.Unlock()
		return wire.Reply{ID: req.ID, Type: wire.TypeSessionClosed, Success: true, SessionID: req.SessionID}, err
	})
}

// sessionCall serves a command on an existing session (12, 13): the
// backend must offer sessions and the id be well-formed (both checked
// before the backend sees it); call runs on a worker, in a slot, bounded
// by opTimeout, and its reply or error is sent.
func (c *conn) sessionCall(req wire.Request, call func(context.Context) (wire.Reply, error)) {
	if aerr := c.g.sessionRef(req.SessionID); aerr != nil {
		c.fail(req.ID, aerr)
		return
	}
	if !c.takeSlot() {
		return
	}
	c.g.workers.Go(func() {
		defer c.giveSlot()
		ctx, cancel := context.WithTimeout(c.ctx, opTimeout)
		defer cancel()
		rep, err := call(ctx)
		if err != nil {
			c.fail(req.ID, toAPIError(err))
			return
		}
		c.send(rep)
	})
}

// REST: POST /sessions, /sessions/renew, /sessions/close. The session id
// travels in bodies only: it is a secret, and URLs end up in logs.

// postOnly answers method_not_allowed to anything but POST.
func (g *Gateway) postOnly(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			w.Header().Set("Allow", "POST")
			g.writeError(w, r, newError(wire.CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path+": use POST"))
			return
		}
		h(w, r)
	}
}

type openSessionBody struct {
	ClientID string `json:"client_id"`
	TTLMS    int64  `json:"ttl_ms"`
}

type sessionIDBody struct {
	SessionID string `json:"session_id"`
}

type sessionBody struct {
	SessionID string `json:"session_id"`
	TTLMS     int64  `json:"ttl_ms"`
}

func (g *Gateway) restOpenSession(w http.ResponseWriter, r *http.Request) {
	var b openSessionBody
	if !g.readBody(w, r, &b, false) {
		return
	}
	if _, aerr := g.sessionLocker(); aerr != nil {
		g.writeError(w, r, aerr)
		return
	}
	opts, aerr := sessionOptions(b.TTLMS, b.ClientID, restOwner)
	if aerr != nil {
		g.writeError(w, r, aerr)
		return
	}
	s, aerr := g.openSession(r.Context(), opts)
	if aerr != nil {
		g.writeError(w, r, aerr)
		return
	}
	writeJSON(w, http.StatusCreated, sessionBody{SessionID: s.ID, TTLMS: durationMS(s.TTL())})
}

// restSessionID reads {"session_id"} and checks it.
func (g *Gateway) restSessionID(w http.ResponseWriter, r *http.Request) (string, bool) {
	var b sessionIDBody
	if !g.readBody(w, r, &b, false) {
		return "", false
	}
	if aerr := g.sessionRef(b.SessionID); aerr != nil {
		g.writeError(w, r, aerr)
		return "", false
	}
	return b.SessionID, true
}

func (g *Gateway) restRenewSession(w http.ResponseWriter, r *http.Request) {
	id, ok := g.restSessionID(w, r)
	if !ok {
		return
	}
	s, err := g.renewSession(r.Context(), id, 0)
	if err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, sessionBody{SessionID: s.ID, TTLMS: durationMS(s.TTL())})
}

func (g *Gateway) restCloseSession(w http.ResponseWriter, r *http.Request) {
	id, ok := g.restSessionID(w, r)
	if !ok {
		return
	}
	if err := g.closeSession(r.Context(), id); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// sessionIDOf is the id of the session a lease belongs to, "" for none.
func sessionIDOf(l *lock.Lease) string {
	if s := l.Session(); s != nil {
		return s.ID
	}
	return ""
}

// positiveTTL is a wire TTL as a duration when it is a valid one, else 0.
func positiveTTL(ms int64) time.Duration {
	d := ttlOption(ms)
	if ms == 0 || kit.ValidateTTL(d) != nil {
		return 0
	}
	return d
}
