// Package fsm is the replicated, deterministic state machine of the Raft lock
// service: the lock table (key → holder), the fencing counter, a small data
// key-value store ("Append Data") and the member directory (raft server id →
// client API address).
//
// Everything here depends only on the state and the applied log entries.
// Applying an entry never reads the local clock: every Entry carries the
// leader's clock reading (Entry.Now) and all time decisions use the FSM clock
//
//	now = max(now of all entries applied so far)
//
// which therefore never goes backwards, even when a newly elected leader's
// clock is behind its predecessor's. A lock is expired iff Expires <= now.
//
// Lock keys and data keys live in one keyspace with distinct prefixes ("l/"
// and "d/"), so they never collide; callers always use unprefixed keys.
//
// The leader-side machinery (request queues, TTL timers, networking) lives
// elsewhere: it builds Entries, encodes them with Encode, submits them to
// raft, and reads the per-op Results from the *ApplyResult that Apply
// returns (raft's ApplyFuture.Response).
package fsm

import (
	"errors"
	"fmt"
	"time"
)

// OpType is the kind of one operation in an Entry.
type OpType uint8

// The operations. Each one reads only the fields its comment names; the
// other fields of the Op are ignored (but still encoded and limit-checked).
const (
	OpAcquire      OpType = 1 // grant Key to (Owner, Handle) for TTL, with Value, if free or expired at the entry's time
	OpRelease      OpType = 2 // free Key if holder's Handle and Token match and it is not expired
	OpRenew        OpType = 3 // holder matches (Handle, Token) and not expired: Expires = now + TTL, TTL = op.TTL
	OpExpire       OpType = 4 // free Key if holder's Token == op.Token and holder.Expires <= now (the leader's TTL timer fired); otherwise NotHeld (renewed meanwhile, or gone)
	OpAppendData   OpType = 5 // data[Key] = Value
	OpExtendAll    OpType = 6 // a newly elected leader: for every live lock, Expires = max(Expires, now + lock.TTL)
	OpSetMember    OpType = 7 // member directory: Key = raft server id, Value = its client API address
	OpRemoveMember OpType = 8 // member directory: delete Key
	// OpAcquireAll opens an all-or-nothing group: the next Token ops of the
	// entry (1..MaxGroup of them, every one an OpAcquire, each on another
	// key) are granted together or not at all. Its own Result is the
	// group's: StatusOK when every acquire was granted, else the status of
	// the first that could not be (the others then answer StatusAborted
	// and change nothing). Entry format version 2 only.
	OpAcquireAll OpType = 9
	// Sessions (entry format version 3; session.go). Key is the session's
	// id. Open: a new session of Owner for TTL (a re-sent open of a live
	// session is OK, changing nothing). Renew: the session lives TTL (its
	// own) from now. Close: the session ends and its leases are released.
	// Expire: if the session's expiry has passed, it ends and its leases
	// expire (NotHeld, with the session's Expires, when it was renewed
	// meanwhile). Close and Expire answer with Token = the leases ended.
	OpSessionOpen   OpType = 10
	OpSessionRenew  OpType = 11
	OpSessionClose  OpType = 12
	OpSessionExpire OpType = 13
)

// maxOpType is the highest OpType that Decode accepts.
const maxOpType = OpSessionExpire

// maxV2OpType is the highest OpType of entry format version 2.
const maxV2OpType = OpAcquireAll

// isSession reports whether t is a session op.
func (t OpType) isSession() bool { return t >= OpSessionOpen && t <= OpSessionExpire }

// maxV1OpType is the highest OpType of entry format version 1.
const maxV1OpType = OpRemoveMember

// String returns the op's name, e.g. "acquire", or "op(N)" for an unknown N.
func (t OpType) String() string {
	switch t {
	case OpAcquire:
		return "acquire"
	case OpRelease:
		return "release"
	case OpRenew:
		return "renew"
	case OpExpire:
		return "expire"
	case OpAppendData:
		return "append-data"
	case OpExtendAll:
		return "extend-all"
	case OpSetMember:
		return "set-member"
	case OpRemoveMember:
		return "remove-member"
	case OpAcquireAll:
		return "acquire-all"
	case OpSessionOpen:
		return "session-open"
	case OpSessionRenew:
		return "session-renew"
	case OpSessionClose:
		return "session-close"
	case OpSessionExpire:
		return "session-expire"
	}
	return fmt.Sprintf("op(%d)", uint8(t))
}

// Limits enforced by Decode, and by Op.Validate with the same constants:
// the leader validates every op before it joins a batch, because one
// over-limit op makes the whole Entry undecodable, and Apply then rejects
// every op in it. Client-facing limits (the lock package's) must be at most
// these.
const (
	MaxKeyLen    = 1024    // bytes of Op.Key (a lock key, data key or server id)
	MaxOwnerLen  = 1024    // bytes of Op.Owner
	MaxHandleLen = 256     // bytes of Op.Handle
	MaxValueLen  = 1 << 20 // bytes of Op.Value
	MaxOps       = 100000  // ops in one Entry
	MaxGroup     = 64      // acquires in one OpAcquireAll group (the lock package's MaxMultiKeys)
	MaxPermits   = 1 << 16 // Op.Permits: the largest semaphore
	// MaxHolders bounds the shared holders of one key, whatever the
	// leader's own (lower, configured) bound: an acquire past it is
	// StatusHeld.
	MaxHolders = 1 << 16
	// MaxLockDelay is the longest Op.LockDelay Apply accepts (a minute,
	// as the lock package's MaxLockDelay).
	MaxLockDelay = time.Minute
)

// Lock modes (Op.Mode, Lock.Mode): the lock package's ModeExclusive and
// ModeShared.
const (
	ModeExclusive uint8 = 0
	ModeShared    uint8 = 1
)

// The Field names of a LimitError.
const (
	FieldType    = "type"
	FieldKey     = "key"
	FieldOwner   = "owner"
	FieldHandle  = "handle"
	FieldValue   = "value"
	FieldPermits = "permits"
	FieldGroup   = "group"
	FieldSession = "session"
)

// LimitError is Op.Validate's error: which field of which op is outside the
// limits. It matches ErrMalformed.
type LimitError struct {
	Op    OpType
	Field string // one of the Field constants
	Len   int    // the field's length in bytes (the value for FieldType, FieldPermits and FieldGroup)
	Limit int    // the field's limit
}

func (e *LimitError) Error() string {
	switch e.Field {
	case FieldType:
		return fmt.Sprintf("%v: unknown op type %d", ErrMalformed, e.Len)
	case FieldPermits:
		return fmt.Sprintf("%v: %s: permits %d, limit %d", ErrMalformed, e.Op, e.Len, e.Limit)
	case FieldGroup:
		return fmt.Sprintf("%v: %s: a group of %d acquires, want 1..%d", ErrMalformed, e.Op, e.Len, e.Limit)
	}
	return fmt.Sprintf("%v: %s: %s is %d bytes, limit %d", ErrMalformed, e.Op, e.Field, e.Len, e.Limit)
}

// Unwrap returns ErrMalformed.
func (e *LimitError) Unwrap() error { return ErrMalformed }

// Op is one operation. See the OpType constants for which fields each type
// reads.
type Op struct {
	Type   OpType
	Key    string // lock key, data key, or raft server id (unprefixed)
	Owner  string // acquire: the client that holds the grant (informational)
	Handle string // acquire/release/renew: the grant's secret identity (typically 32 lowercase hex chars, stored as 16 bytes then)
	Token  uint64 // release/renew/expire: the fencing token of the grant
	TTL    time.Duration
	Value  []byte // acquire: the lock's value; append-data: the data; set-member: the address
	// Acquire only (entry format version 2): the mode (ModeExclusive or
	// ModeShared), the semaphore's N (Permits > 0 needs ModeShared; 0 is a
	// mutex or a read lock), and the lock-delay that keeps the key from
	// being granted again for that long after this grant ends by expiry.
	Mode      uint8
	Permits   uint32
	LockDelay time.Duration
	// Session, on an acquire (entry format version 3), is the id of the
	// session the lease joins (TTL is then ignored: the session's).
	Session string
}

// version returns the entry format version o needs: 1, 2 or 3.
func (o *Op) version() byte {
	switch {
	case o.Type > maxV2OpType || o.Session != "":
		return entryVersionV3
	case o.Type > maxV1OpType || o.Mode != 0 || o.Permits != 0 || o.LockDelay != 0:
		return entryVersionV2
	}
	return entryVersion
}

// Validate reports whether o can be encoded and decoded: a known Type and
// fields within the limits; the error is a *LimitError. It does not judge
// semantics (an empty key or a non-positive TTL is decodable; Apply answers
// StatusInvalid for it).
func (o Op) Validate() error {
	limit := func(field string, n, max int) error {
		return &LimitError{Op: o.Type, Field: field, Len: n, Limit: max}
	}
	switch {
	case o.Type < OpAcquire || o.Type > maxOpType:
		return limit(FieldType, int(o.Type), int(maxOpType))
	case len(o.Key) > MaxKeyLen:
		return limit(FieldKey, len(o.Key), MaxKeyLen)
	case len(o.Owner) > MaxOwnerLen:
		return limit(FieldOwner, len(o.Owner), MaxOwnerLen)
	case len(o.Handle) > MaxHandleLen:
		return limit(FieldHandle, len(o.Handle), MaxHandleLen)
	case len(o.Session) > MaxSessionLen:
		return limit(FieldSession, len(o.Session), MaxSessionLen)
	case len(o.Value) > MaxValueLen:
		return limit(FieldValue, len(o.Value), MaxValueLen)
	case o.Permits > MaxPermits:
		return limit(FieldPermits, int(o.Permits), MaxPermits)
	case o.Type == OpAcquireAll && (o.Token < 1 || o.Token > MaxGroup):
		return limit(FieldGroup, int(min(o.Token, MaxGroup+1)), MaxGroup)
	}
	return nil
}

// Entry is one Raft log entry's payload: the leader's clock reading and a
// batch of ops applied in order, atomically (no read of the FSM sees a state
// between two ops of one Entry).
type Entry struct {
	Now int64 // leader's clock, unix nanoseconds
	Ops []Op
}

// Validate reports whether Encode(e) will decode: at most MaxOps ops, each
// passing Op.Validate. The error names the first offending op.
func (e Entry) Validate() error {
	if len(e.Ops) > MaxOps {
		return fmt.Errorf("%w: %d ops, limit %d", ErrMalformed, len(e.Ops), MaxOps)
	}
	for i := range e.Ops {
		if err := e.Ops[i].Validate(); err != nil {
			return fmt.Errorf("op %d: %w", i, err)
		}
	}
	return checkGroups(e.Ops)
}

// checkGroups checks the structure of OpAcquireAll groups: each marker is
// followed by Token ops, all OpAcquire (so groups never nest). Decode
// rejects an entry that breaks it, as Entry.Validate does.
func checkGroups(ops []Op) error {
	for i := 0; i < len(ops); i++ {
		if ops[i].Type != OpAcquireAll {
			continue
		}
		k := ops[i].Token
		if k < 1 || k > MaxGroup || uint64(len(ops)-i-1) < k {
			return fmt.Errorf("%w: op %d: group of %d acquires, %d ops follow", ErrMalformed, i, k, len(ops)-i-1)
		}
		for j := i + 1; j <= i+int(k); j++ {
			if ops[j].Type != OpAcquire {
				return fmt.Errorf("%w: op %d: %s inside the group of op %d (only acquires may follow)", ErrMalformed, j, ops[j].Type, i)
			}
		}
		i += int(k)
	}
	return nil
}

// ErrMalformed is wrapped by every error of Decode, Op.Validate and
// Entry.Validate, and by the error Apply returns for an undecodable entry.
var ErrMalformed = errors.New("fsm: malformed entry")

// Status is the outcome of one op.
type Status uint8

// The statuses.
const (
	StatusOK      Status = iota // the op took effect (or, for an idempotent acquire, already had)
	StatusHeld                  // acquire: another live holder has the key; Result names it
	StatusNotHeld               // release/renew/expire: no matching live holder (expire: no matching expired holder); nothing changed
	StatusInvalid               // bad arguments (TTL <= 0, empty key or handle, empty address, unknown member); nothing changed
	// StatusPermitsMismatch: a shared acquire whose Permits differ from
	// those of the key's live shared holders; Result names the oldest.
	StatusPermitsMismatch
	// StatusDelayed: acquire of a key in its lock-delay (a lease with a
	// LockDelay ended by expiry); Result.Expires is when the delay ends
	// (FSM clock), Token and Owner are zero.
	StatusDelayed
	// StatusAborted: an acquire of an OpAcquireAll group that failed
	// because another acquire of the group could not be granted; nothing
	// changed.
	StatusAborted
	// StatusNoSession: an acquire in a session that is gone (expired, or
	// never opened); nothing changed.
	StatusNoSession
)

// String returns the status's name.
func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusHeld:
		return "held"
	case StatusNotHeld:
		return "not-held"
	case StatusInvalid:
		return "invalid"
	case StatusPermitsMismatch:
		return "permits-mismatch"
	case StatusDelayed:
		return "delayed"
	case StatusAborted:
		return "aborted"
	case StatusNoSession:
		return "no-session"
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Result is the outcome of one op.
//
// For lock ops (acquire, release, renew, expire), Token, Owner and Expires
// describe the key's holder after the op, when it has one:
//   - acquire OK: the granted (or, when idempotent, existing) grant;
//   - acquire Held: the current live holder;
//   - renew OK: the renewed grant (Expires is the new expiry);
//   - release/expire OK: zeros (the key is free);
//   - NotHeld: the holder stored for the key if any (possibly expired, or
//     renewed meanwhile: an expire refused because of a renewal reports the
//     new Expires so the leader can re-arm its timer), else zeros.
//
// The Handle is never reported. Other ops leave these fields zero.
type Result struct {
	Status  Status
	Token   uint64 // acquire OK: the granted token; StatusHeld: the current holder's token
	Owner   string // the holder's owner (see above)
	Expires int64  // the (new) holder's expiry on the leader clock, unix ns; 0 if none
	// Key, for an exclusive acquire OK, is the key as the lock table
	// stores it: a leader that hands out the lease names its key with
	// these bytes, and the request's copy can go.
	Key string
}

// ApplyResult is what Apply returns for a decodable LogCommand entry: the
// raft log index and one Result per op, in order.
type ApplyResult struct {
	Index   uint64
	Results []Result
}

// Lock is a copy of one lock-table entry.
type Lock struct {
	Key     string
	Owner   string
	Handle  string // the grant's secret identity; never show it to other clients
	Token   uint64
	TTL     time.Duration // the TTL of the last grant or renewal
	Expires int64         // leader clock, unix ns; the lock is expired iff Expires <= FSM.Now()
	Value   []byte
	// Mode, Permits and LockDelay as the grant asked for them.
	Mode      uint8
	Permits   uint32
	LockDelay time.Duration
	// Session is the id of the lease's session ("" for none): the lease
	// lives as long as the session, and Expires is the session's. A
	// secret, as Handle.
	Session string
}
