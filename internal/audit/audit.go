// Package audit writes the audit trail of a lock service shared by many
// tenants: who (identity), from where (remote address), did what (op), on
// which keys, on which node, with what result — including what nobody asked
// for at that moment, such as the release of a session's locks when the
// session expires.
//
// A Log writes one JSON object per line (see Event) to a file that it
// rotates by size: before a write that would push the file past
// Options.MaxBytes, path becomes path.1, path.1 becomes path.2 and so on up
// to path.N (N = Options.MaxFiles); the oldest is dropped. A line is never
// split across files. Files are created with mode 0600.
//
// # Cost to the caller
//
// Record never touches the disk. It encodes the event on the caller's
// goroutine and puts the line on a bounded in-memory queue
// (Options.QueueSize, 4096 by default) that one writer goroutine drains
// through a bufio.Writer, flushing whenever the queue empties.
//
// When the queue is full, Record waits for room — completeness of the
// audit trail comes before the speed of a lock operation — but at most
// Options.FullWait (1 s by default). An event still without room then is
// dropped and counted, and the Log sheds load: until the writer has emptied
// the queue, further Records that find it full drop their event at once
// instead of waiting too. A disk that stalls therefore costs the lock
// service one FullWait per stall, not one per operation. A full queue on
// a healthy disk (a burst) only ever makes Record wait.
//
// # Failures
//
// An I/O error (write, flush, open, rotation) never panics and never
// reaches the caller of Record: it is counted (Stats.Errors), the events it
// loses are counted (Stats.Dropped), and it is logged through slog once —
// further failures are counted silently until a write succeeds again, which
// is logged too. Flush and Close return the first error since the previous
// Flush. Close writes everything queued first, so on a disk that hangs it
// waits as long as the disk does.
//
// One Log, in one process, writes a given path: two would rotate each
// other's files.
//
// # Secrets
//
// Event has no field for a lease handle (the token that releases a lock), a
// session id, a bearer token or a lock's value, and none may be put in
// Detail: Record blanks a Detail that contains a run of 32 to 64 lowercase
// hex digits, the shape of handles and session ids (see Record).
package audit

import (
	"encoding/json"
	"log/slog"
	"time"
)

// Op is what an event records. The set is closed: the constants below.
// Refusals are not ops of their own: a refused grant is an event with
// OpGrant and a Result other than ResultOK.
type Op string

// The ops.
const (
	// OpGrant: a lock (or a read lock, a permit, a multi-key grant) was
	// granted, or the request for it was refused (Result).
	OpGrant Op = "grant"
	// OpRelease: the holder released a lock.
	OpRelease Op = "release"
	// OpExpire: a lease ran out without being renewed and was freed.
	OpExpire Op = "expire"
	// OpForceRelease: an administrator released someone else's lock.
	OpForceRelease Op = "force_release"
	// OpSessionOpen: a session was opened.
	OpSessionOpen Op = "session_open"
	// OpSessionClose: a session was closed by its client; its leases
	// were released with it.
	OpSessionClose Op = "session_close"
	// OpSessionExpire: a session ran out without a keep-alive; its leases
	// were released with it (Keys lists them).
	OpSessionExpire Op = "session_expire"
	// OpMemberAdd: a node was added to the cluster.
	OpMemberAdd Op = "member_add"
	// OpMemberRemove: a node was removed from the cluster.
	OpMemberRemove Op = "member_remove"
	// OpSnapshot: a snapshot was saved or restored (Detail says which).
	OpSnapshot Op = "snapshot"
	// OpPolicyReload: the access policy (identities, quotas) was
	// reloaded.
	OpPolicyReload Op = "policy_reload"
)

var ops = []Op{
	OpGrant, OpRelease, OpExpire, OpForceRelease,
	OpSessionOpen, OpSessionClose, OpSessionExpire,
	OpMemberAdd, OpMemberRemove, OpSnapshot, OpPolicyReload,
}

// Ops returns every Op, in the order of their declaration.
func Ops() []Op { return append([]Op(nil), ops...) }

// Valid reports whether o is one of the Op constants. Record writes an
// event whatever its Op, and Read accepts any (a newer version may add
// ops); Valid is for tests and tools.
func (o Op) Valid() bool {
	for _, k := range ops {
		if o == k {
			return true
		}
	}
	return false
}

// ResultOK is the Result of an operation that succeeded. Any other Result
// is the error code of the protocol that refused it ("forbidden",
// "quota_exceeded", "session_expired", …).
const ResultOK = "ok"

// Event is one line of the audit log.
//
// It deliberately has no field for secrets: not the lease handle that
// releases a lock, not a session id, not a bearer or admin token, not a
// lock's value. Whoever holds one of those can act as its owner, and an
// audit log is read by more people than should. Identity names the caller
// (or, for an event no request caused, the creator of the lease or
// session); it is never the credential that proved it. Detail is short free
// text, and Record blanks one that looks like it carries a handle or a
// session id.
type Event struct {
	// Time is when it happened, written in UTC as RFC 3339 with
	// nanoseconds (fixed width). Record fills in the Log's clock when it
	// is zero. Lines are in the order Records queued them, so events
	// recorded concurrently may be out of Time order by a few
	// microseconds.
	Time time.Time `json:"time"`
	// Node is the id of the node that wrote the event. Record fills in
	// Options.Node when it is empty.
	Node string `json:"node"`
	// Identity is the named identity of the caller, or of the creator of
	// the lease or session the event is about.
	Identity string `json:"identity"`
	// Remote is the remote address of the request that caused the event;
	// empty (and omitted) for an event no request caused.
	Remote string `json:"remote,omitempty"`
	// Op is what happened.
	Op Op `json:"op"`
	// Keys are the keys concerned, possibly none (written as []).
	Keys []string `json:"keys"`
	// FencingToken is the token of a grant (and of the lease a release or
	// an expiry ended); 0 (omitted) when there is none.
	FencingToken uint64 `json:"fencing_token,omitempty"`
	// Result is ResultOK or an error code.
	Result string `json:"result"`
	// Detail is optional short free text; Record cuts it to MaxDetail
	// bytes.
	Detail string `json:"detail,omitempty"`
}

// timeFormat is RFC 3339 with nanoseconds, fixed width so that lines sort
// and align as text.
const timeFormat = "2006-01-02T15:04:05.000000000Z07:00"

// wireEvent is Event as written: its time a preformatted string.
type wireEvent struct {
	Time         string   `json:"time"`
	Node         string   `json:"node"`
	Identity     string   `json:"identity"`
	Remote       string   `json:"remote,omitempty"`
	Op           Op       `json:"op"`
	Keys         []string `json:"keys"`
	FencingToken uint64   `json:"fencing_token,omitempty"`
	Result       string   `json:"result"`
	Detail       string   `json:"detail,omitempty"`
}

// MarshalJSON writes e as one line of the log (without the newline): its
// time in UTC with nine fractional digits, and its Keys as [] when nil.
func (e Event) MarshalJSON() ([]byte, error) {
	keys := e.Keys
	if keys == nil {
		keys = []string{}
	}
	return json.Marshal(wireEvent{
		Time:         e.Time.UTC().Format(timeFormat),
		Node:         e.Node,
		Identity:     e.Identity,
		Remote:       e.Remote,
		Op:           e.Op,
		Keys:         keys,
		FencingToken: e.FencingToken,
		Result:       e.Result,
		Detail:       e.Detail,
	})
}

// MaxDetail bounds Event.Detail, in bytes: Record cuts a longer one (at a
// UTF-8 boundary).
const MaxDetail = 512

// Defaults of Options.
const (
	DefaultMaxBytes  = 100 << 20
	DefaultMaxFiles  = 5
	DefaultQueueSize = 4096
	DefaultFullWait  = time.Second
)

// Options configure a Log. The zero value is usable.
type Options struct {
	// MaxBytes is the size a file may reach before the Log rotates it:
	// DefaultMaxBytes (100 MiB) when 0. A single line longer than that
	// is written whole, alone in its file.
	MaxBytes int64
	// MaxFiles is the number of rotated files kept (path.1 … path.N,
	// path.1 the newest), besides path itself: DefaultMaxFiles (5) when
	// 0.
	MaxFiles int
	// Node fills Event.Node when Record gets an event without one.
	Node string
	// Now fills Event.Time when Record gets an event without one:
	// time.Now when nil. It must be safe for concurrent use.
	Now func() time.Time
	// QueueSize bounds the events waiting for the writer:
	// DefaultQueueSize (4096) when 0.
	QueueSize int
	// FullWait bounds how long Record waits for room in a full queue
	// before it drops the event: DefaultFullWait (1 s) when 0; negative
	// means never wait.
	FullWait time.Duration
	// Logger receives the Log's own errors: slog.Default() when nil.
	Logger *slog.Logger
}

// Stats are a Log's counters, each monotonic. Once a Log is closed,
// Written + Dropped is the number of events Record accepted.
type Stats struct {
	// Written counts events handed to the file (the OS has them; no
	// fsync).
	Written uint64
	// Dropped counts events accepted by Record but never written: the
	// queue stayed full past FullWait, or an I/O error lost them.
	Dropped uint64
	// Errors counts I/O errors: failed writes, flushes, opens, rotations
	// and the final close.
	Errors uint64
	// Redacted counts events whose Detail Record blanked.
	Redacted uint64
	// Rotations counts files rotated.
	Rotations uint64
}
