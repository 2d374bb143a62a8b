package fsm

import "strings"

// Identities: who created each lease and session. The gateway names the
// identity of every request (its credential's, docs/security.md
// "Tenants"); raftlock records it in the owner field of the acquire and
// session-open ops, tagged (TagOwner), so that it rides in a field every
// entry and snapshot format already carries: a binary that predates
// identities applies and replicates such an entry unchanged (it shows the
// tag as part of the owner), and no format gate is needed. The state
// keeps per-identity counts of leases and sessions, derived state rebuilt
// from the records, which quotas read cluster-wide.

const (
	tagStart = "\x1e" // an owner from the contract has no control characters
	tagEnd   = "\x1f"
)

// TagOwner returns the stored owner for identity's owner (owner alone when
// identity is empty).
func TagOwner(identity, owner string) string {
	if identity == "" {
		return owner
	}
	return tagStart + identity + tagEnd + owner
}

// SplitOwner returns the identity and owner of a stored owner; identity is
// "" for an owner stored without one.
func SplitOwner(stored string) (identity, owner string) {
	if !strings.HasPrefix(stored, tagStart) {
		return "", stored
	}
	id, owner, ok := strings.Cut(stored[len(tagStart):], tagEnd)
	if !ok {
		return "", stored
	}
	return id, owner
}

// ownerIdentity is SplitOwner's identity.
func ownerIdentity(stored string) string {
	id, _ := SplitOwner(stored)
	return id
}

// Usage is what one identity holds.
type Usage struct {
	Leases   int // held leases (each shared holder counts one)
	Sessions int // open sessions (expired ones not yet ended among them)
}

// IdentityUsage returns what identity holds in the state.
func (f *FSM) IdentityUsage(identity string) Usage {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return Usage{Leases: f.idLeases[identity], Sessions: f.idSessions[identity]}
}

// EachIdentityUsage calls fn with every identity that holds something.
func (f *FSM) EachIdentityUsage(fn func(identity string, u Usage)) {
	f.mu.RLock()
	m := make(map[string]Usage, len(f.idLeases)+len(f.idSessions))
	for id, n := range f.idLeases {
		u := m[id]
		u.Leases = n
		m[id] = u
	}
	for id, n := range f.idSessions {
		u := m[id]
		u.Sessions = n
		m[id] = u
	}
	f.mu.RUnlock()
	for id, u := range m {
		fn(id, u)
	}
}

// countLease adds d to the leases of r's identity (f.mu held for writing).
func (f *FSM) countLease(r *record, d int) {
	if id := ownerIdentity(r.owner); id != "" {
		bump(&f.idLeases, id, d)
	}
}

// countSession adds d to the sessions of s's identity.
func (f *FSM) countSession(s *session, d int) {
	if id := ownerIdentity(s.owner); id != "" {
		bump(&f.idSessions, id, d)
	}
}

func bump(m *map[string]int, id string, d int) {
	if *m == nil {
		*m = make(map[string]int)
	}
	if n := (*m)[id] + d; n > 0 {
		(*m)[id] = n
	} else {
		delete(*m, id)
	}
}

// recount rebuilds the per-identity counts from the state (f.mu held for
// writing): after a restore.
func (f *FSM) recount() {
	f.idLeases, f.idSessions = nil, nil
	for k, r := range f.kv {
		if strings.HasPrefix(k, lockPrefix) {
			f.countLease(r, 1)
		}
	}
	for _, g := range f.groups {
		for _, h := range g.holders {
			f.countLease(h, 1)
		}
	}
	for _, s := range f.sessions {
		f.countSession(s, 1)
	}
}

// HolderIdentity is the identity of key's holder whose handle is handle;
// ok is false when no holder of key has it.
func (f *FSM) HolderIdentity(key, handle string) (identity string, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if r := f.kv[lockPrefix+key]; r != nil {
		if r.handleIs(handle) {
			return ownerIdentity(r.owner), true
		}
		return "", false
	}
	if g := f.groups[key]; g != nil {
		for _, h := range g.holders {
			if h.handleIs(handle) {
				return ownerIdentity(h.owner), true
			}
		}
	}
	return "", false
}

// SessionIdentity is the identity of session id; ok is false when there
// is no such session.
func (f *FSM) SessionIdentity(id string) (identity string, ok bool) {
	f.mu.RLock()
	defer f.mu.RUnlock()
	s := f.sessions[id]
	if s == nil {
		return "", false
	}
	return ownerIdentity(s.owner), true
}
