package fsm

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// Key prefixes of the one keyspace that holds locks and data.
const (
	lockPrefix = "l/"
	dataPrefix = "d/"
)

// record is one entry of the keyspace: a lock holder under lockPrefix, a data
// value (value only) under dataPrefix, or one shared holder of a group.
//
// Records are immutable once stored in FSM.kv or in a group: every change
// stores a new record. Snapshot relies on this to copy only pointers.
type record struct {
	owner   string
	hstr    string // the handle, unless it is 32 lowercase hex chars: then "" and h holds its 16 bytes
	value   string
	h       [16]byte
	token   uint64
	ttl     int64
	expires int64    // 0 for a session lease: see exp
	delay   int64    // the grant's lock-delay (ns), 0 for none
	sess    *session // the session the lease belongs to, or nil
}

// exp is r's expiry on the FSM clock: its own, or its session's.
func (r *record) exp() int64 {
	if r.sess != nil {
		return r.sess.expires.Load()
	}
	return r.expires
}

// group is the shared holders of one key (a read lock, or a semaphore of
// permits holders), oldest grant (lowest token) first. Groups are immutable
// once stored in FSM.groups, as records are: every change stores a new
// group with a new slice (copy-on-write).
type group struct {
	permits uint32
	holders []*record
}

// find returns the index of the holder with token, or -1.
func (g *group) find(token uint64) int {
	i, ok := slices.BinarySearchFunc(g.holders, token, func(r *record, t uint64) int { return cmp.Compare(r.token, t) })
	if !ok {
		return -1
	}
	return i
}

// FSM is the lock service's state machine. It implements raft.FSM. Apply,
// Snapshot and Restore are called by raft from one goroutine; the read
// methods are safe to call concurrently with them and with each other, and
// always see the state between two entries, never in the middle of one.
//
// A key is held exclusively (one record in kv, under lockPrefix) or shared
// (a group in groups), never both: exclusive locks keep the compact layout
// of one record per key, and shared holders live apart.
type FSM struct {
	mu       sync.RWMutex
	kv       map[string]*record  // lockPrefix+key → exclusive holder, dataPrefix+key → data
	groups   map[string]*group   // key → its shared holders (never empty)
	delays   map[string]int64    // key → end of its lock-delay (FSM clock); entries whose end passed are stale
	sessions map[string]*session // session id → session (session.go)
	members  map[string]string   // raft server id → client API address
	counter  uint64              // fencing counter: the last token granted
	now      int64               // max Entry.Now applied
	index    uint64              // raft index of the last applied entry
	nlocks   int                 // exclusive lock records in kv
	nshared  int                 // shared holders in groups
	// idLeases and idSessions count each identity's leases and sessions
	// (identity.go): derived state.
	idLeases, idSessions map[string]int
	observer             func(index uint64, ev Event)
	// The format gate (format.go): the replicated gate, the highest
	// format this FSM reads (0: MaxFormat), why it halted, and whom to
	// tell.
	gate      Gate
	maxFormat uint8
	halted    error
	onHalt    func(error)
}

var _ raft.FSM = (*FSM)(nil)

// New returns an empty FSM: no locks, no data, no members, counter 0.
func New() *FSM {
	return &FSM{kv: make(map[string]*record), groups: make(map[string]*group), delays: make(map[string]int64),
		members: make(map[string]string), sessions: make(map[string]*session), gate: DefaultGate}
}

// EventKind is what happened to a key's holder (an observer Event).
type EventKind uint8

// The event kinds.
const (
	EventGranted  EventKind = iota + 1 // a new grant (a new token)
	EventRenewed                       // a holder's expiry moved (renew, extend-all)
	EventReleased                      // a holder released its lease (or was force-released)
	EventExpired                       // a holder's lease ran out (expire, or taken over by an acquire)
	// EventSession: a session was opened or its expiry moved (renewal,
	// extend-all); Event.Session is the session now, Key is empty.
	EventSession
	// EventSessionEnded: a session ended (closed or expired), after the
	// events of its leases; Event.Session is the session as it was.
	EventSessionEnded
)

// String returns "granted", "renewed", "released" or "expired".
func (k EventKind) String() string {
	switch k {
	case EventGranted:
		return "granted"
	case EventRenewed:
		return "renewed"
	case EventReleased:
		return "released"
	case EventExpired:
		return "expired"
	case EventSession:
		return "session"
	case EventSessionEnded:
		return "session-ended"
	}
	return fmt.Sprintf("event(%d)", uint8(k))
}

// Event is one change of a key's holders, as the observer hears it.
type Event struct {
	Kind EventKind
	Key  string
	// Lock is the holder granted or renewed (as it is now), or the one
	// that left (as it was); Lock.Token is the token granted, renewed or
	// freed. Lock.Handle is set: the observer is the node's own.
	Lock Lock
	// DelayUntil, for an EventExpired of a lease with a LockDelay, is the
	// end of the key's lock-delay (FSM clock, unix ns) when it is still
	// ahead; 0 otherwise.
	DelayUntil int64
	// Session is the session of an EventSession or EventSessionEnded.
	Session SessionInfo
}

// SetObserver registers fn (nil removes it). Apply calls fn synchronously,
// after it has released the FSM's lock (so fn may call the read methods,
// which then see the state after the whole entry), once per change of a
// key's holders, in op order:
//   - acquire that granted a new token: EventGranted (preceded by an
//     EventExpired for each expired holder it took over);
//   - renew, and extend-all for each lock whose expiry it moved (those in
//     no particular order): EventRenewed;
//   - release: EventReleased; expire: EventExpired (with DelayUntil).
//
// An idempotent acquire (same handle, still live) and ops that failed call
// nothing. index is the raft log index of the entry. fn runs on raft's FSM
// goroutine, so it must be cheap, must not block, and must not call Apply,
// Snapshot or Restore. Restore does not call fn: after a restore, rebuild
// derived state with ForEachLock and ForEachDelay.
func (f *FSM) SetObserver(fn func(index uint64, ev Event)) {
	f.mu.Lock()
	f.observer = fn
	f.mu.Unlock()
}

// event is a (key, record) pair: a snapshot's record, a ForEachLock item.
type event struct {
	key string
	rec *record
}

// change is one observer event, converted to an Event after the lock is
// released.
type change struct {
	kind    EventKind
	key     string
	rec     *record
	mode    uint8
	permits uint32
	until   int64
	sess    SessionInfo // EventSession, EventSessionEnded
}

// Apply applies a committed raft log entry. For a raft.LogCommand entry whose
// Data Decode accepts, it applies the ops in order, atomically, and returns
// *ApplyResult with one Result per op. For undecodable Data it returns an
// error (wrapping ErrMalformed) and changes nothing, not even AppliedIndex.
// Other log types return nil and change nothing. Apply never reads the local
// clock.
func (f *FSM) Apply(l *raft.Log) interface{} {
	if l == nil || l.Type != raft.LogCommand {
		return nil
	}
	if err := f.readableEntry(l); err != nil {
		return err
	}
	e, err := Decode(l.Data)
	if err != nil {
		return fmt.Errorf("fsm: log index %d: %w", l.Index, err)
	}
	res := &ApplyResult{Index: l.Index, Results: make([]Result, len(e.Ops))}

	f.mu.Lock()
	if f.halted != nil { // halted between the check and here: by a gate
		f.mu.Unlock()
		return f.halted
	}
	obs := f.observer
	var changes []change
	var evp *[]change
	if obs != nil {
		evp = &changes
	}
	f.now = max(f.now, e.Now)
	for i := 0; i < len(e.Ops); i++ {
		if e.Ops[i].Type == OpAcquireAll {
			k := int(e.Ops[i].Token)
			if k < 1 || k > MaxGroup || k > len(e.Ops)-i-1 {
				res.Results[i] = Result{Status: StatusInvalid} // Decode rejects this; hand-built entries only
				continue
			}
			f.applyGroup(e.Ops[i+1:i+1+k], res.Results[i:i+1+k], evp)
			i += k
			continue
		}
		if e.Ops[i].Type.isSession() {
			res.Results[i] = f.applySession(&e.Ops[i], evp)
			continue
		}
		res.Results[i] = f.applyOp(&e.Ops[i], evp)
	}
	f.index = l.Index
	if len(f.delays) > 0 && l.Index%1024 == 0 {
		for k, until := range f.delays {
			if until <= f.now {
				delete(f.delays, k) // stale: memory only, snapshots skip them anyway
			}
		}
	}
	f.mu.Unlock()

	for _, c := range changes {
		if c.rec == nil {
			obs(l.Index, Event{Kind: c.kind, Session: c.sess})
			continue
		}
		ev := Event{Kind: c.kind, Key: c.key, Lock: c.rec.lock(c.key), DelayUntil: c.until}
		ev.Lock.Mode, ev.Lock.Permits = c.mode, c.permits
		obs(l.Index, ev)
	}
	return res
}

// applyGroup applies an OpAcquireAll group: ops are its acquires, res[0]
// the marker's result and res[1:] theirs. Every acquire is checked first;
// only if all can be granted is any applied.
func (f *FSM) applyGroup(ops []Op, res []Result, ev *[]change) {
	seen := make(map[string]struct{}, len(ops))
	for i := range ops {
		if _, dup := seen[ops[i].Key]; dup || ops[i].Type != OpAcquire {
			for j := range res {
				res[j] = Result{Status: StatusInvalid}
			}
			return
		}
		seen[ops[i].Key] = struct{}{}
	}
	grants := uint64(0)
	var failed *Result
	fresh := make([]bool, len(ops))
	for i := range ops {
		r, grant := f.checkAcquire(&ops[i])
		res[i+1] = r
		fresh[i] = grant
		if grant {
			grants++
		} else if r.Status != StatusOK && failed == nil {
			failed = &res[i+1]
		}
	}
	if failed == nil && f.counter > math.MaxUint64-grants {
		res[0] = Result{Status: StatusInvalid}
		for i := range ops {
			res[i+1] = Result{Status: StatusAborted}
		}
		return
	}
	if failed != nil {
		res[0] = *failed
		for i := range ops {
			if res[i+1].Status == StatusOK {
				res[i+1] = Result{Status: StatusAborted}
			}
		}
		return
	}
	res[0] = Result{Status: StatusOK}
	for i := range ops {
		if fresh[i] {
			res[i+1] = f.grant(&ops[i], ev)
			continue
		}
		// A re-sent group (same handle) answered with a grant it already
		// holds: renewed to TTL from this entry, as the leader renews a
		// re-sent single acquire. Its caller counts the lease from the
		// re-sent request, later than the original: without the renewal
		// it would believe it holds the key after the key expired here.
		renew := Op{Type: OpRenew, Key: ops[i].Key, Handle: ops[i].Handle, Token: res[i+1].Token, TTL: ops[i].TTL}
		res[i+1] = f.applyOp(&renew, ev)
	}
}

// checkAcquire decides an acquire at f.now without changing anything. It
// returns the result and whether a new grant is due (then the result is
// only StatusOK, without a token); StatusOK with grant false is an
// idempotent re-send, answered with the existing grant.
func (f *FSM) checkAcquire(o *Op) (Result, bool) {
	if o.Key == "" || o.Handle == "" || o.TTL <= 0 || o.Mode > ModeShared ||
		(o.Permits > 0 && o.Mode != ModeShared) || o.Permits > MaxPermits || o.LockDelay < 0 || o.LockDelay > MaxLockDelay {
		return Result{Status: StatusInvalid}, false
	}
	now := f.now
	if o.Session != "" {
		if s := f.sessions[o.Session]; s == nil || s.expires.Load() <= now {
			return Result{Status: StatusNoSession}, false
		}
	}
	var until int64 // the latest end of a lock-delay still ahead
	if r := f.kv[lockPrefix+o.Key]; r != nil {
		if r.exp() > now {
			if r.handleIs(o.Handle) {
				return r.result(StatusOK), false // a resend: same grant, no new token
			}
			return r.result(StatusHeld), false
		}
		until = max(until, r.delayEnd())
	}
	if g := f.groups[o.Key]; g != nil {
		live := 0
		var oldest *record
		for _, h := range g.holders {
			if h.exp() <= now {
				until = max(until, h.delayEnd())
				continue
			}
			if h.handleIs(o.Handle) {
				return h.result(StatusOK), false
			}
			live++
			if oldest == nil {
				oldest = h
			}
		}
		if live > 0 {
			switch {
			case o.Mode != ModeShared:
				return oldest.result(StatusHeld), false
			case g.permits != o.Permits:
				return oldest.result(StatusPermitsMismatch), false
			case (o.Permits > 0 && live >= int(o.Permits)) || live >= MaxHolders:
				return oldest.result(StatusHeld), false
			}
		}
	}
	until = max(until, f.delays[o.Key])
	if until > now {
		return Result{Status: StatusDelayed, Expires: until}, false
	}
	if f.counter == math.MaxUint64 {
		return Result{Status: StatusInvalid}, false // fencing counter exhausted
	}
	return Result{Status: StatusOK}, true
}

// delayEnd is when the lock-delay of r ends if r ends by expiry: its
// expiry plus its delay (0 without a delay).
func (r *record) delayEnd() int64 {
	if r.delay <= 0 {
		return 0
	}
	return addTTL(r.exp(), r.delay)
}

// grant applies an acquire that checkAcquire allowed: expired holders are
// dropped, and o's grant stored with the next token.
func (f *FSM) grant(o *Op, ev *[]change) Result {
	now := f.now
	lk := lockPrefix + o.Key
	if r := f.kv[lk]; r != nil { // expired (checkAcquire): taken over
		delete(f.kv, lk)
		f.nlocks--
		f.countLease(r, -1)
		r.unlink(o.Key)
		addChange(ev, change{kind: EventExpired, key: o.Key, rec: r})
	}
	var keep []*record
	if g := f.groups[o.Key]; g != nil {
		keep = make([]*record, 0, len(g.holders)+1)
		for _, h := range g.holders {
			if h.exp() > now {
				keep = append(keep, h)
				continue
			}
			f.nshared--
			f.countLease(h, -1)
			h.unlink(o.Key)
			addChange(ev, change{kind: EventExpired, key: o.Key, rec: h, mode: ModeShared, permits: g.permits})
		}
		delete(f.groups, o.Key)
	}
	delete(f.delays, o.Key) // passed (checkAcquire)
	f.counter++
	r := &record{
		owner:   o.Owner,
		value:   string(o.Value),
		token:   f.counter,
		ttl:     int64(o.TTL),
		expires: addTTL(now, int64(o.TTL)),
		delay:   int64(o.LockDelay),
	}
	r.h, r.hstr = packHandle(o.Handle)
	if o.Session != "" {
		// A session lease: the session's TTL and expiry (checkAcquire
		// found it live).
		r.sess = f.sessions[o.Session]
		r.ttl, r.expires = r.sess.ttl, 0
		if r.owner == r.sess.owner {
			r.owner = r.sess.owner // one copy of the owner for all its leases
		}
		r.link(lk[len(lockPrefix):]) // shares the table key's bytes: the op's copy can go
	}
	f.countLease(r, 1)
	if o.Mode == ModeExclusive {
		f.kv[lk] = r
		f.nlocks++
		addChange(ev, change{kind: EventGranted, key: o.Key, rec: r})
	} else {
		f.groups[o.Key] = &group{permits: o.Permits, holders: append(keep, r)}
		f.nshared++
		addChange(ev, change{kind: EventGranted, key: o.Key, rec: r, mode: ModeShared, permits: o.Permits})
	}
	return r.result(StatusOK)
}

// expired records r's end by expiry: its lock-delay, if still ahead,
// becomes the key's tombstone. It returns the delay's end (0: none).
func (f *FSM) expired(key string, r *record) int64 {
	until := r.delayEnd()
	if until <= f.now {
		return 0
	}
	if until > f.delays[key] {
		f.delays[key] = until
	}
	return f.delays[key]
}

// applyOp applies one op at f.now; f.mu is held for writing. When ev is not
// nil it gets the op's observer events.
func (f *FSM) applyOp(o *Op, ev *[]change) Result {
	now := f.now
	switch o.Type {
	case OpAcquire:
		r, grant := f.checkAcquire(o)
		if !grant {
			return r
		}
		return f.grant(o, ev)

	case OpRelease, OpRenew:
		if o.Key == "" || o.Handle == "" || (o.Type == OpRenew && o.TTL <= 0) {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		if r := f.kv[k]; r != nil {
			if r.exp() <= now || r.token != o.Token || !r.handleIs(o.Handle) {
				return r.result(StatusNotHeld)
			}
			if o.Type == OpRelease {
				delete(f.kv, k)
				f.nlocks--
				f.countLease(r, -1)
				r.unlink(o.Key)
				addChange(ev, change{kind: EventReleased, key: o.Key, rec: r})
				return Result{Status: StatusOK}
			}
			if r.sess != nil {
				// A session lease lives as long as its session: renewing it
				// is renewing the session.
				f.renewSession(r.sess, ev)
				return r.result(StatusOK)
			}
			nr := *r
			nr.ttl = int64(o.TTL)
			nr.expires = addTTL(now, int64(o.TTL))
			f.kv[k] = &nr
			addChange(ev, change{kind: EventRenewed, key: o.Key, rec: &nr})
			return nr.result(StatusOK)
		}
		g := f.groups[o.Key]
		if g == nil {
			return Result{Status: StatusNotHeld}
		}
		i := g.find(o.Token)
		if i < 0 {
			return g.holders[0].result(StatusNotHeld)
		}
		h := g.holders[i]
		if h.exp() <= now || !h.handleIs(o.Handle) {
			return h.result(StatusNotHeld)
		}
		if o.Type == OpRelease {
			f.removeShared(o.Key, g, i)
			addChange(ev, change{kind: EventReleased, key: o.Key, rec: h, mode: ModeShared, permits: g.permits})
			return Result{Status: StatusOK}
		}
		if h.sess != nil {
			f.renewSession(h.sess, ev)
			return h.result(StatusOK)
		}
		nh := *h
		nh.ttl = int64(o.TTL)
		nh.expires = addTTL(now, int64(o.TTL))
		hs := slices.Clone(g.holders)
		hs[i] = &nh
		f.groups[o.Key] = &group{permits: g.permits, holders: hs}
		addChange(ev, change{kind: EventRenewed, key: o.Key, rec: &nh, mode: ModeShared, permits: g.permits})
		return nh.result(StatusOK)

	case OpExpire:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		if r := f.kv[k]; r != nil {
			if r.token != o.Token || r.exp() > now {
				return r.result(StatusNotHeld)
			}
			delete(f.kv, k)
			f.nlocks--
			f.countLease(r, -1)
			r.unlink(o.Key)
			addChange(ev, change{kind: EventExpired, key: o.Key, rec: r, until: f.expired(o.Key, r)})
			return Result{Status: StatusOK}
		}
		g := f.groups[o.Key]
		if g == nil {
			return Result{Status: StatusNotHeld}
		}
		i := g.find(o.Token)
		if i < 0 {
			return g.holders[0].result(StatusNotHeld)
		}
		h := g.holders[i]
		if h.exp() > now {
			return h.result(StatusNotHeld)
		}
		f.removeShared(o.Key, g, i)
		addChange(ev, change{kind: EventExpired, key: o.Key, rec: h, mode: ModeShared, permits: g.permits, until: f.expired(o.Key, h)})
		return Result{Status: StatusOK}

	case OpExtendAll:
		// Sessions first: their leases follow them, without a copy each.
		for _, ss := range f.sessionsSorted() {
			if ss.expires.Load() > now {
				f.renewSession(ss, ev)
			}
		}
		for k, r := range f.kv {
			if len(k) < len(lockPrefix) || k[:len(lockPrefix)] != lockPrefix || r.sess != nil || r.expires <= now {
				continue // data, a session's lease, or an expired lock: extending must not revive it
			}
			exp := addTTL(now, r.ttl)
			if exp <= r.expires {
				continue
			}
			nr := *r
			nr.expires = exp
			f.kv[k] = &nr
			addChange(ev, change{kind: EventRenewed, key: k[len(lockPrefix):], rec: &nr})
		}
		for k, g := range f.groups {
			var hs []*record
			for i, h := range g.holders {
				exp := addTTL(now, h.ttl)
				if h.sess != nil || h.expires <= now || exp <= h.expires {
					continue
				}
				if hs == nil {
					hs = slices.Clone(g.holders)
				}
				nh := *h
				nh.expires = exp
				hs[i] = &nh
				addChange(ev, change{kind: EventRenewed, key: k, rec: &nh, mode: ModeShared, permits: g.permits})
			}
			if hs != nil {
				f.groups[k] = &group{permits: g.permits, holders: hs}
			}
		}
		return Result{Status: StatusOK}

	case OpAppendData:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		r := &record{value: string(o.Value)}
		f.kv[dataPrefix+o.Key] = r
		if o.Key == GateKey {
			f.gate = gateOf(r)
			f.checkGate()
		}
		return Result{Status: StatusOK}

	case OpSetMember:
		if o.Key == "" || len(o.Value) == 0 {
			return Result{Status: StatusInvalid}
		}
		f.members[o.Key] = string(o.Value)
		return Result{Status: StatusOK}

	case OpRemoveMember:
		if _, ok := f.members[o.Key]; !ok {
			return Result{Status: StatusInvalid}
		}
		delete(f.members, o.Key)
		return Result{Status: StatusOK}
	}
	// Decode rejects unknown types, and a marker outside Apply's group
	// handling; this is for hand-built ops in tests.
	return Result{Status: StatusInvalid}
}

// removeShared stores key's group without its holder i (copy-on-write),
// or deletes the group when i was its last holder.
func (f *FSM) removeShared(key string, g *group, i int) {
	f.nshared--
	f.countLease(g.holders[i], -1)
	g.holders[i].unlink(key)
	if len(g.holders) == 1 {
		delete(f.groups, key)
		return
	}
	hs := make([]*record, 0, len(g.holders)-1)
	hs = append(append(hs, g.holders[:i]...), g.holders[i+1:]...)
	f.groups[key] = &group{permits: g.permits, holders: hs}
}

func addChange(ev *[]change, c change) {
	if ev != nil {
		*ev = append(*ev, c)
	}
}

// addTTL returns now+ttl, saturating at math.MaxInt64 (ttl > 0).
func addTTL(now, ttl int64) int64 {
	if now > math.MaxInt64-ttl {
		return math.MaxInt64
	}
	return now + ttl
}

func (r *record) result(s Status) Result {
	return Result{Status: s, Token: r.token, Owner: r.owner, Expires: r.exp()}
}

// lock returns a copy of r as the Lock of key (unprefixed).
func (r *record) lock(key string) Lock {
	l := Lock{
		Key:     key,
		Owner:   r.owner,
		Handle:  r.handle(),
		Token:   r.token,
		TTL:     time.Duration(r.ttl),
		Expires: r.exp(),
		// Mode and Permits are the caller's to set: a record does not
		// know whether it is a group member.
		LockDelay: time.Duration(r.delay),
	}
	if r.sess != nil {
		l.Session = r.sess.id
	}
	if r.value != "" {
		l.Value = []byte(r.value)
	}
	return l
}

const hexDigits = "0123456789abcdef"

// packHandle stores a handle of 32 lowercase hex chars (what lock.NewHandle
// makes) as 16 bytes; any other handle is kept as the string.
func packHandle(h string) (raw [16]byte, str string) {
	if len(h) != 32 {
		return raw, h
	}
	for i := range raw {
		hi, lo := unhex(h[2*i]), unhex(h[2*i+1])
		if hi > 15 || lo > 15 {
			return [16]byte{}, h
		}
		raw[i] = hi<<4 | lo
	}
	return raw, ""
}

func unhex(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	}
	return 255
}

// handleIs reports whether h is r's handle, without allocating, in time
// that depends only on the lengths: the handle is the lease's secret, and
// an early exit at the first wrong character would let a client measure
// how much of a guess was right. (The length is no secret: handles are
// 32 to 64 hex characters.)
func (r *record) handleIs(h string) bool {
	if r.hstr != "" {
		return EqualHandles(r.hstr, h)
	}
	if len(h) != 32 {
		return false
	}
	var diff byte
	for i, b := range r.h {
		diff |= h[2*i] ^ hexDigits[b>>4]
		diff |= h[2*i+1] ^ hexDigits[b&15]
	}
	return diff == 0
}

// EqualHandles compares two lease handles in constant time for a given
// length (as crypto/subtle.ConstantTimeCompare, without converting the
// strings to byte slices).
func EqualHandles(a, b string) bool {
	if len(a) != len(b) {
		return false
	}
	var diff byte
	for i := 0; i < len(a); i++ {
		diff |= a[i] ^ b[i]
	}
	return diff == 0
}

// handle returns r's handle as a string.
func (r *record) handle() string {
	if r.hstr != "" {
		return r.hstr
	}
	var b [32]byte
	for i, c := range r.h {
		b[2*i], b[2*i+1] = hexDigits[c>>4], hexDigits[c&15]
	}
	return string(b[:])
}

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
		fn(HolderRef{Owner: r.owner, Token: r.token, Expires: r.exp(), LockDelay: time.Duration(r.delay), rec: r})
		return
	}
	if g == nil {
		return
	}
	for _, h := range g.holders {
		if !fn(HolderRef{Owner: h.owner, Token: h.token, Expires: h.exp(), LockDelay: time.Duration(h.delay),
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
	return []byte(r.value), true
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
