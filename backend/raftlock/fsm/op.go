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
)

// maxOpType is the highest OpType that Decode accepts.
const maxOpType = OpRemoveMember

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
)

// The Field names of a LimitError.
const (
	FieldType   = "type"
	FieldKey    = "key"
	FieldOwner  = "owner"
	FieldHandle = "handle"
	FieldValue  = "value"
)

// LimitError is Op.Validate's error: which field of which op is outside the
// limits. It matches ErrMalformed.
type LimitError struct {
	Op    OpType
	Field string // one of the Field constants
	Len   int    // the field's length in bytes (the type's value for FieldType)
	Limit int    // the field's limit
}

func (e *LimitError) Error() string {
	if e.Field == FieldType {
		return fmt.Sprintf("%v: unknown op type %d", ErrMalformed, e.Len)
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
	case len(o.Value) > MaxValueLen:
		return limit(FieldValue, len(o.Value), MaxValueLen)
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
}
