package fsm

import (
	"cmp"
	"slices"
	"strings"
	"sync/atomic"
	"time"
)

// Sessions (entry format version 3): many leases kept alive by one
// keep-alive. A session has an id (its secret, as a lease's handle is), an
// owner, a TTL and an expiry on the FSM clock. An acquire with Op.Session
// puts its lease in the session: the lease lives exactly as long as the
// session (record.exp is the session's expiry), so renewing the session —
// one op, whatever the number of its leases — renews them all. A session
// that ends ends every lease in it in the same op: OpSessionClose releases
// them, OpSessionExpire (the leader's timer, when the session's expiry has
// passed) expires them, with their lock-delays.
//
// The session's expiry is the only mutable field of the state (an atomic
// the Apply goroutine alone writes): records point at their session, and
// Snapshot copies every session's fields, so a snapshot stays a
// point-in-time copy. The session's set of leases is derived state, rebuilt
// by Restore from the records.

// MaxSessionLen bounds a session id, as a handle.
const MaxSessionLen = MaxHandleLen

// session is one session. id, owner and ttl never change.
type session struct {
	id      string
	owner   string
	ttl     int64
	expires atomic.Int64 // FSM clock; written only by Apply, under FSM.mu
	// leases are the session's leases, in no order; a lease's record
	// knows its index (record.slot), so that it leaves in constant time.
	// Only under FSM.mu. 24 B a lease, where a set keyed by (key, token)
	// took twice that.
	leases []sessLease
}

// sessLease is one lease of a session: its key (the table's bytes) and
// its record.
type sessLease struct {
	key string
	r   *record
}

// link records that r, the holder of key, belongs to its session.
func (r *record) link(key string) {
	if s := r.sess; s != nil {
		r.slot = uint32(len(s.leases))
		s.leases = append(s.leases, sessLease{key, r})
	}
}

// unlink records that r, a holder of key, left the table: the session's
// last lease takes its place.
func (r *record) unlink(string) {
	s := r.sess
	if s == nil {
		return
	}
	i, n := int(r.slot), len(s.leases)
	if i >= n || s.leases[i].r != r {
		return // not linked
	}
	last := s.leases[n-1]
	s.leases[i] = last
	last.r.slot = uint32(i)
	s.leases[n-1] = sessLease{}
	s.leases = s.leases[:n-1]
	if cap(s.leases) > 64 && len(s.leases) < cap(s.leases)/4 {
		s.leases = slices.Clone(s.leases) // give back what a shrunk session no longer needs
	}
}

// SessionInfo is a copy of one session.
type SessionInfo struct {
	ID      string // the session's secret id
	Owner   string
	TTL     time.Duration
	Expires int64 // FSM clock, unix ns
	Leases  int   // leases in the session
}

// Session returns a copy of session id, and false when there is none.
func (f *FSM) Session(id string) (SessionInfo, bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.sessions[id]
	if s == nil {
		return SessionInfo{}, false
	}
	return s.info(), true
}

func (s *session) info() SessionInfo {
	return SessionInfo{ID: s.id, Owner: s.owner, TTL: time.Duration(s.ttl), Expires: s.expires.Load(), Leases: len(s.leases)}
}

// ForEachSession calls fn with a copy of every session (expired ones not
// yet ended included), in no particular order, until fn returns false; as
// ForEachLock, over a point-in-time copy.
func (f *FSM) ForEachSession(fn func(SessionInfo) bool) {
	f.mu.RLock()
	ss := make([]SessionInfo, 0, len(f.sessions))
	for _, s := range f.sessions {
		ss = append(ss, s.info())
	}
	f.mu.RUnlock()
	for _, s := range ss {
		if !fn(s) {
			return
		}
	}
}

// NumSessions returns how many sessions are stored.
func (f *FSM) NumSessions() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return len(f.sessions)
}

// applySession applies a session op (f.mu held for writing).
func (f *FSM) applySession(o *Op, ev *[]change) Result {
	now := f.now
	if o.Key == "" {
		return Result{Status: StatusInvalid}
	}
	s := f.sessions[o.Key]
	switch o.Type {
	case OpSessionOpen:
		if o.TTL <= 0 {
			return Result{Status: StatusInvalid}
		}
		if s != nil {
			if s.expires.Load() > now {
				return s.result(StatusOK) // a re-sent open: the same session
			}
			return s.result(StatusNotHeld)
		}
		s = &session{id: o.Key, owner: o.Owner, ttl: int64(o.TTL)}
		s.expires.Store(addTTL(now, int64(o.TTL)))
		f.sessions[o.Key] = s
		f.countSession(s, 1)
		addChange(ev, change{kind: EventSession, sess: s.info()})
		return s.result(StatusOK)

	case OpSessionRenew:
		if s == nil || s.expires.Load() <= now {
			return Result{Status: StatusNotHeld}
		}
		f.renewSession(s, ev)
		return s.result(StatusOK)

	case OpSessionClose, OpSessionExpire:
		if s == nil {
			return Result{Status: StatusNotHeld}
		}
		expired := s.expires.Load() <= now
		if o.Type == OpSessionExpire && !expired {
			return s.result(StatusNotHeld) // renewed meanwhile: re-arm
		}
		// Token reports how many leases ended with the session.
		return Result{Status: StatusOK, Token: uint64(f.endSession(s, expired, ev))}
	}
	return Result{Status: StatusInvalid}
}

// renewSession moves s's expiry to a full TTL from now (never back).
func (f *FSM) renewSession(s *session, ev *[]change) {
	if exp := addTTL(f.now, s.ttl); exp > s.expires.Load() {
		s.expires.Store(exp)
		addChange(ev, change{kind: EventSession, sess: s.info()})
	}
}

// endSession removes s and every lease in it, in key order (so that the
// observer hears the same events in the same order on every node): as
// released, or, when the session expired, as expired (with lock-delays).
// It returns how many leases ended.
func (f *FSM) endSession(s *session, expired bool, ev *[]change) int {
	keys := slices.Clone(s.leases)
	slices.SortFunc(keys, func(a, b sessLease) int {
		if c := strings.Compare(a.key, b.key); c != 0 {
			return c
		}
		return cmp.Compare(a.r.token, b.r.token)
	})
	kind := EventReleased
	if expired {
		kind = EventExpired
	}
	for _, k := range keys {
		if r := f.kv[lockPrefix+k.key]; r != nil && r.token == k.r.token {
			delete(f.kv, lockPrefix+k.key)
			f.nlocks--
			f.countLease(r, -1)
			c := change{kind: kind, key: k.key, rec: r}
			if expired {
				c.until = f.expired(k.key, r)
			}
			addChange(ev, c)
			continue
		}
		if g := f.groups[k.key]; g != nil {
			if i := g.find(k.r.token); i >= 0 {
				h := g.holders[i]
				f.removeShared(k.key, g, i)
				c := change{kind: kind, key: k.key, rec: h, mode: ModeShared, permits: g.permits}
				if expired {
					c.until = f.expired(k.key, h)
				}
				addChange(ev, c)
			}
		}
	}
	delete(f.sessions, s.id)
	f.countSession(s, -1)
	addChange(ev, change{kind: EventSessionEnded, sess: s.info()})
	return len(keys)
}

// sessionsSorted returns the sessions in id order (f.mu held).
func (f *FSM) sessionsSorted() []*session {
	ss := make([]*session, 0, len(f.sessions))
	for _, s := range f.sessions {
		ss = append(ss, s)
	}
	slices.SortFunc(ss, func(a, b *session) int { return strings.Compare(a.id, b.id) })
	return ss
}

func (s *session) result(st Status) Result {
	return Result{Status: st, Owner: s.owner, Expires: s.expires.Load()}
}
