package fsm

// The FSM's read methods, safe to call concurrently with Apply.

import (
	"time"
)

// Lock returns a copy of key's holder as stored, even if it is expired by
// some clock (judge with Expires against your own time, or FSM.Now), and
// false when the key has no holder. For a shared key it returns the oldest
// stored holder (Holders lists them all).
func (f *FSM) Lock(key string) (Lock, bool) {
	f.mu.RLock()
	r := f.kv[lockPrefix+key]
	g := f.groups[key]
	f.mu.RUnlock()
	if r != nil {
		return r.lock(key), true // records are immutable: no lock needed
	}
	if g != nil {
		return g.lock(key, 0), true
	}
	return Lock{}, false
}

// lock returns holder i of g as the Lock of key.
func (g *group) lock(key string, i int) Lock {
	l := g.holders[i].lock(key)
	l.Mode, l.Permits = ModeShared, g.permits
	return l
}

// Holders returns copies of every holder stored for key (expired ones
// included), oldest grant first, and the index of the last applied entry
// they reflect: a watch that starts from them misses no later entry.
func (f *FSM) Holders(key string) ([]Lock, uint64) {
	f.mu.RLock()
	r := f.kv[lockPrefix+key]
	g := f.groups[key]
	index := f.index
	f.mu.RUnlock()
	switch {
	case r != nil:
		return []Lock{r.lock(key)}, index
	case g != nil:
		ls := make([]Lock, len(g.holders))
		for i := range g.holders {
			ls[i] = g.lock(key, i)
		}
		return ls, index
	}
	return nil, index
}

// HolderRef is a stored holder as EachHolder shows it: its fields without
// copies (records are immutable), and its handle only to compare.
type HolderRef struct {
	Owner     string
	Token     uint64
	Expires   int64
	LockDelay time.Duration
	Mode      uint8
	Permits   uint32
	rec       *record
}

// HandleIs reports whether h is the holder's handle (in time that does
// not depend on how much of h is right).
func (r HolderRef) HandleIs(h string) bool { return r.rec.handleIs(h) }

// SessionID is the id of the session the holder's lease belongs to, "" for
// none.
func (r HolderRef) SessionID() string {
	if r.rec.sess == nil {
		return ""
	}
	return r.rec.sess.id
}

// EachHolder calls fn with every holder stored for key (expired ones
// included), oldest grant first, until fn returns false: the leader's
// scheduler reads a key's state with it on every decision, without the
// copies Holders makes.
func (f *FSM) EachHolder(key string, fn func(HolderRef) bool) {
	f.mu.RLock()
	r := f.kv[lockPrefix+key]
	g := f.groups[key]
	f.mu.RUnlock()
	if r != nil {
		fn(HolderRef{Owner: r.owner, Token: r.token, Expires: r.exp(), LockDelay: time.Duration(r.delay()), rec: r})
		return
	}
	if g == nil {
		return
	}
	for _, h := range g.holders {
		if !fn(HolderRef{Owner: h.owner, Token: h.token, Expires: h.exp(), LockDelay: time.Duration(h.delay()),
			Mode: ModeShared, Permits: g.permits, rec: h}) {
			return
		}
	}
}

// Holder returns the holder of key with token, as stored (perhaps
// expired), and false when there is none.
func (f *FSM) Holder(key string, token uint64) (Lock, bool) {
	f.mu.RLock()
	r := f.kv[lockPrefix+key]
	g := f.groups[key]
	f.mu.RUnlock()
	if r != nil && r.token == token {
		return r.lock(key), true
	}
	if g != nil {
		if i := g.find(token); i >= 0 {
			return g.lock(key, i), true
		}
	}
	return Lock{}, false
}

// Delay returns the end of key's lock-delay (FSM clock, unix ns), or 0 when
// it has none ahead of the FSM clock. (An expired holder not yet freed may
// hold a delay of its own: see Lock.LockDelay.)
func (f *FSM) Delay(key string) int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	if until := f.delays[key]; until > f.now {
		return until
	}
	return 0
}

// ForEachDelay calls fn with every lock-delay still ahead of the FSM clock
// (key, end), in no particular order, until fn returns false; as
// ForEachLock, over a point-in-time copy.
func (f *FSM) ForEachDelay(fn func(key string, until int64) bool) {
	f.mu.RLock()
	ds := make([]kvInt, 0, len(f.delays))
	for k, until := range f.delays {
		if until > f.now {
			ds = append(ds, kvInt{k, until})
		}
	}
	f.mu.RUnlock()
	for _, d := range ds {
		if !fn(d.k, d.v) {
			return
		}
	}
}

type kvInt struct {
	k string
	v int64
}

// Data returns a copy of the value last stored for key by OpAppendData, and
// false when there is none.
func (f *FSM) Data(key string) ([]byte, bool) {
	f.mu.RLock()
	r := f.kv[dataPrefix+key]
	f.mu.RUnlock()
	if r == nil {
		return nil, false
	}
	return []byte(r.value()), true
}

// ForEachLock calls fn with a copy of every stored lock, each shared holder
// on its own (expired ones included; compare Expires with Now), in no
// particular order, until fn returns false. It iterates over a point-in-time copy of the table taken
// before the first call, so fn may call any method of the FSM, and entries
// applied meanwhile are not seen.
func (f *FSM) ForEachLock(fn func(Lock) bool) {
	f.mu.RLock()
	locks := make([]event, 0, f.nlocks)
	for k, r := range f.kv {
		if len(k) >= len(lockPrefix) && k[:len(lockPrefix)] == lockPrefix {
			locks = append(locks, event{k[len(lockPrefix):], r})
		}
	}
	groups := make([]struct {
		key string
		g   *group
	}, 0, len(f.groups))
	for k, g := range f.groups {
		groups = append(groups, struct {
			key string
			g   *group
		}{k, g})
	}
	f.mu.RUnlock()
	for _, e := range locks {
		if !fn(e.rec.lock(e.key)) {
			return
		}
	}
	for _, kg := range groups {
		for i := range kg.g.holders {
			if !fn(kg.g.lock(kg.key, i)) {
				return
			}
		}
	}
}

// Members returns a copy of the member directory: raft server id → client
// API address.
func (f *FSM) Members() map[string]string {
	f.mu.RLock()
	defer f.mu.RUnlock()
	m := make(map[string]string, len(f.members))
	for k, v := range f.members {
		m[k] = v
	}
	return m
}

// LastToken returns the fencing counter: the last token granted (0 before
// the first grant). The next grant gets LastToken()+1.
func (f *FSM) LastToken() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.counter
}

// Now returns the state machine's clock: the maximum Entry.Now applied
// (unix ns; 0 before the first entry). A lock is expired iff Expires <= Now.
func (f *FSM) Now() int64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.now
}

// AppliedIndex returns the raft index of the last entry applied (or of the
// snapshot restored).
func (f *FSM) AppliedIndex() uint64 {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.index
}

// NumLocks returns how many holders are stored (exclusive and shared),
// expired ones included.
func (f *FSM) NumLocks() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.nlocks + f.nshared
}
