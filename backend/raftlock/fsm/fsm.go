package fsm

import (
	"cmp"
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
//
// A held lease's record is small (80 B, three pointers for the collector
// to scan): what most leases lack — a value, a handle that is not standard
// hex, a lock-delay — lives in a side struct allocated only when one of
// them is set.
type record struct {
	owner   string
	h       [16]byte // the handle's 16 bytes, unless x.hstr holds it
	token   uint64
	ttl     int64
	expires int64      // 0 for a session lease: see exp
	sess    *session   // the session the lease belongs to, or nil
	x       *recordExt // nil when all its fields are zero
	// slot is the lease's index in its session's set (session.go):
	// derived state, the one field that changes after the record is
	// stored, only under FSM.mu held for writing, and read by no copy.
	slot uint32
}

// recordExt is the rarely set part of a record, immutable as the record.
type recordExt struct {
	value string
	hstr  string // the handle, unless it is 32 lowercase hex chars: then "" and record.h holds its 16 bytes
	delay int64  // the grant's lock-delay (ns), 0 for none
}

// value, hstr and delay read the record's side fields ("" or 0 when unset).
func (r *record) value() string {
	if r.x == nil {
		return ""
	}
	return r.x.value
}

func (r *record) hstr() string {
	if r.x == nil {
		return ""
	}
	return r.x.hstr
}

func (r *record) delay() int64 {
	if r.x == nil {
		return 0
	}
	return r.x.delay
}

// ext returns r's side struct, allocating it: only while r is being built
// (a stored record's side struct is shared by its copies).
func (r *record) ext() *recordExt {
	if r.x == nil {
		r.x = new(recordExt)
	}
	return r.x
}

// setValue, setHstr and setDelay set a side field of a record being built;
// a zero value allocates nothing.
func (r *record) setValue(v string) {
	if v != "" || r.x != nil {
		r.ext().value = v
	}
}

func (r *record) setHstr(h string) {
	if h != "" || r.x != nil {
		r.ext().hstr = h
	}
}

func (r *record) setDelay(d int64) {
	if d != 0 || r.x != nil {
		r.ext().delay = d
	}
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
		LockDelay: time.Duration(r.delay()),
	}
	if r.sess != nil {
		l.Session = r.sess.id
	}
	if v := r.value(); v != "" {
		l.Value = []byte(v)
	}
	return l
}
