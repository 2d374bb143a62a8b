package fsm

import (
	"fmt"
	"math"
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
// value (value only) under dataPrefix.
//
// Records are immutable once stored in FSM.kv: every change stores a new
// record. Snapshot relies on this to copy only pointers.
type record struct {
	owner   string
	hstr    string // the handle, unless it is 32 lowercase hex chars: then "" and h holds its 16 bytes
	value   string
	h       [16]byte
	token   uint64
	ttl     int64
	expires int64
}

// FSM is the lock service's state machine. It implements raft.FSM. Apply,
// Snapshot and Restore are called by raft from one goroutine; the read
// methods are safe to call concurrently with them and with each other, and
// always see the state between two entries, never in the middle of one.
type FSM struct {
	mu       sync.RWMutex
	kv       map[string]*record // lockPrefix+key → holder, dataPrefix+key → data
	members  map[string]string  // raft server id → client API address
	counter  uint64             // fencing counter: the last token granted
	now      int64              // max Entry.Now applied
	index    uint64             // raft index of the last applied entry
	nlocks   int                // lock records in kv
	observer func(index uint64, key string, l *Lock)
}

var _ raft.FSM = (*FSM)(nil)

// New returns an empty FSM: no locks, no data, no members, counter 0.
func New() *FSM {
	return &FSM{kv: make(map[string]*record), members: make(map[string]string)}
}

// SetObserver registers fn (nil removes it). Apply calls fn synchronously,
// after it has released the FSM's lock (so fn may call the read methods,
// which then see the state after the whole entry), once per op that changed
// a key's holder, in op order:
//   - acquire that granted a new token, renew, and extend-all for each lock
//     whose expiry it moved (those calls in no particular order): l is a
//     copy of the new holder;
//   - release and expire that freed the key: l is nil.
//
// An idempotent acquire (same handle, still live) and ops that failed call
// nothing. A takeover of an expired lock calls fn once, with the new holder.
// index is the raft log index of the entry. fn runs on raft's FSM goroutine,
// so it must be cheap, must not block, and must not call Apply, Snapshot or
// Restore. Restore does not call fn: after a restore, rebuild derived state
// with ForEachLock.
func (f *FSM) SetObserver(fn func(index uint64, key string, l *Lock)) {
	f.mu.Lock()
	f.observer = fn
	f.mu.Unlock()
}

// event is one observer call: rec is the new holder, nil when freed.
type event struct {
	key string
	rec *record
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
	e, err := Decode(l.Data)
	if err != nil {
		return fmt.Errorf("fsm: log index %d: %w", l.Index, err)
	}
	res := &ApplyResult{Index: l.Index, Results: make([]Result, len(e.Ops))}

	f.mu.Lock()
	obs := f.observer
	var events []event
	var evp *[]event
	if obs != nil {
		evp = &events
	}
	f.now = max(f.now, e.Now)
	for i := range e.Ops {
		res.Results[i] = f.applyOp(&e.Ops[i], evp)
	}
	f.index = l.Index
	f.mu.Unlock()

	for _, ev := range events {
		if ev.rec == nil {
			obs(l.Index, ev.key, nil)
			continue
		}
		lk := ev.rec.lock(ev.key)
		obs(l.Index, ev.key, &lk)
	}
	return res
}

// applyOp applies one op at f.now; f.mu is held for writing. When ev is not
// nil it gets the op's observer events.
func (f *FSM) applyOp(o *Op, ev *[]event) Result {
	now := f.now
	switch o.Type {
	case OpAcquire:
		if o.Key == "" || o.Handle == "" || o.TTL <= 0 {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		old := f.kv[k]
		if old != nil && old.expires > now {
			if old.handleIs(o.Handle) {
				return old.result(StatusOK) // a resend: same grant, no new token
			}
			return old.result(StatusHeld)
		}
		if f.counter == math.MaxUint64 {
			return Result{Status: StatusInvalid} // fencing counter exhausted
		}
		if old == nil {
			f.nlocks++
		}
		f.counter++
		r := &record{
			owner:   o.Owner,
			value:   string(o.Value),
			token:   f.counter,
			ttl:     int64(o.TTL),
			expires: addTTL(now, int64(o.TTL)),
		}
		r.h, r.hstr = packHandle(o.Handle)
		f.kv[k] = r
		addEvent(ev, o.Key, r)
		return r.result(StatusOK)

	case OpRelease, OpRenew:
		if o.Key == "" || o.Handle == "" || (o.Type == OpRenew && o.TTL <= 0) {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		r := f.kv[k]
		if r == nil {
			return Result{Status: StatusNotHeld}
		}
		if r.expires <= now || r.token != o.Token || !r.handleIs(o.Handle) {
			return r.result(StatusNotHeld)
		}
		if o.Type == OpRelease {
			delete(f.kv, k)
			f.nlocks--
			addEvent(ev, o.Key, nil)
			return Result{Status: StatusOK}
		}
		nr := *r
		nr.ttl = int64(o.TTL)
		nr.expires = addTTL(now, int64(o.TTL))
		f.kv[k] = &nr
		addEvent(ev, o.Key, &nr)
		return nr.result(StatusOK)

	case OpExpire:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		k := lockPrefix + o.Key
		r := f.kv[k]
		if r == nil {
			return Result{Status: StatusNotHeld}
		}
		if r.token != o.Token || r.expires > now {
			return r.result(StatusNotHeld)
		}
		delete(f.kv, k)
		f.nlocks--
		addEvent(ev, o.Key, nil)
		return Result{Status: StatusOK}

	case OpExtendAll:
		for k, r := range f.kv {
			if len(k) < len(lockPrefix) || k[:len(lockPrefix)] != lockPrefix || r.expires <= now {
				continue // data, or an expired lock: extending must not revive it
			}
			exp := addTTL(now, r.ttl)
			if exp <= r.expires {
				continue
			}
			nr := *r
			nr.expires = exp
			f.kv[k] = &nr
			addEvent(ev, k[len(lockPrefix):], &nr)
		}
		return Result{Status: StatusOK}

	case OpAppendData:
		if o.Key == "" {
			return Result{Status: StatusInvalid}
		}
		f.kv[dataPrefix+o.Key] = &record{value: string(o.Value)}
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
	// Decode rejects unknown types; this is for hand-built ops in tests.
	return Result{Status: StatusInvalid}
}

func addEvent(ev *[]event, key string, r *record) {
	if ev != nil {
		*ev = append(*ev, event{key, r})
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
	return Result{Status: s, Token: r.token, Owner: r.owner, Expires: r.expires}
}

// lock returns a copy of r as the Lock of key (unprefixed).
func (r *record) lock(key string) Lock {
	l := Lock{
		Key:     key,
		Owner:   r.owner,
		Handle:  r.handle(),
		Token:   r.token,
		TTL:     time.Duration(r.ttl),
		Expires: r.expires,
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
// false when the key has no holder.
func (f *FSM) Lock(key string) (Lock, bool) {
	f.mu.RLock()
	r := f.kv[lockPrefix+key]
	f.mu.RUnlock()
	if r == nil {
		return Lock{}, false
	}
	return r.lock(key), true // records are immutable: no lock needed
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

// ForEachLock calls fn with a copy of every stored lock (expired ones
// included; compare Expires with Now), in no particular order, until fn
// returns false. It iterates over a point-in-time copy of the table taken
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
	f.mu.RUnlock()
	for _, e := range locks {
		if !fn(e.rec.lock(e.key)) {
			return
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

// NumLocks returns how many locks are stored, expired ones included.
func (f *FSM) NumLocks() int {
	f.mu.RLock()
	defer f.mu.RUnlock()
	return f.nlocks
}
