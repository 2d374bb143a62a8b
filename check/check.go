// Package check holds the pure checkers that `lockgate-bench chaos` runs over
// the history of a Jepsen-style campaign: clients acquire a lock, write to a
// fenced and an unfenced store with the lease's fencing token, hold, and
// release, while faults are injected.
//
// Every function here is pure: it reads a History (and the list of injected
// faults) and returns numbers; nothing is modified, nothing does I/O except
// Visualize, which writes to the io.Writer it is given.
//
// All times are time.Durations since the campaign start, read from one
// monotonic clock; in JSON (a campaign's history file) they are
// nanoseconds.
//
// The checkers:
//
//   - Overlaps: two different clients believed they held the same key at the
//     same instant, at least one of them exclusively (shared holds of a read
//     lock or semaphore may coexist); or more shared holders than a
//     semaphore's permits believed they held it at once.
//   - StaleWrites: the fenced store accepted a write with a token lower than
//     one it had accepted before (must never happen), how many stale writes it
//     rejected (the fence at work), and how many out-of-order writes the
//     unfenced store applied (what the fence protects against).
//   - Tokens: no fencing token granted twice for a key, and none lower than
//     one granted for the key before it was requested; with modes
//     (ModeTokens), an exclusive grant's token above every shared grant's
//     received before it, and a shared grant's above every exclusive one's.
//   - Linearizable: the acquire/release history is linearizable with respect
//     to a lease-lock model (porcupine), key by key with a time bound per
//     key: package check/linearize (LinearizabilityByKey), whose Check runs
//     every checker here and that one.
//   - Availability: how long no acquire succeeded, and how long each fault
//     took to recover from.
package check

import (
	"fmt"
	"time"
)

// Kind is the kind of an operation.
type Kind int

// The kinds of operation a chaos client records.
const (
	// Acquire asks for a lease on Key (Acquire or TryAcquire).
	Acquire Kind = iota + 1
	// Release gives back the lease with token Token.
	Release
	// Write writes to a store with the token Token of the lease the client
	// believes it holds.
	Write
	// Read asks who holds Key (Inspect): OK with Holders, the tokens of
	// the holders it was shown (none: the key was free).
	Read
)

// String names the kind.
func (k Kind) String() string {
	switch k {
	case Acquire:
		return "acquire"
	case Release:
		return "release"
	case Write:
		return "write"
	case Read:
		return "read"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Op is one operation of one client, on the campaign's monotonic clock.
type Op struct {
	// Client numbers the client, from zero (porcupine's visualisation
	// wants zero-based client ids).
	Client int    `json:"client"`
	Key    string `json:"key"`
	Kind   Kind   `json:"kind"`
	// Start is the invocation, End the completion (for an Unknown op: when
	// the client gave up). A retried request that may return the first
	// attempt's grant (raftlock's idempotent handles) must be recorded as one
	// op starting at the first attempt.
	Start time.Duration `json:"start"`
	End   time.Duration `json:"end"`
	// OK: completed successfully (Acquire granted; Release confirmed; Write
	// accepted by its store).
	OK bool `json:"ok,omitempty"`
	// Unknown: the outcome is unknown (timeout, connection lost): the op may
	// or may not have taken effect. Mutually exclusive with OK. An op that is
	// neither OK nor Unknown definitely failed: an Acquire that was not
	// granted, a Release answered "not held", a Write the store rejected.
	Unknown bool `json:"unknown,omitempty"`
	// Token: for an OK Acquire the fencing token granted; for Release and
	// Write the token of the lease used.
	Token uint64 `json:"token,omitempty"`
	// TTL is, for an Acquire, the lease TTL requested (0 means
	// lock.DefaultTTL). Renewals are not recorded, so leases must not be
	// auto-renewed during a campaign.
	TTL time.Duration `json:"ttl,omitempty"`
	// Deadline is, for an OK Acquire, the lease deadline on the client: the
	// latest instant the client may believe it holds the lock. Zero means
	// not recorded (the belief then lasts until release or last write).
	Deadline time.Duration `json:"deadline,omitempty"`
	// Session (OK Acquire only): the lease lives on a client session whose
	// keep-alive, not the acquire, starts its TTL; Deadline then bounds
	// the earliest expiry (linearizability).
	Session bool `json:"session,omitempty"`
	// Shared (Acquire only): the grant is a shared hold (a read lock, or
	// a semaphore permit when Permits > 0), not an exclusive one. Shared
	// holders may coexist; an exclusive holder coexists with nobody
	// (Overlaps, ModeTokens).
	Shared bool `json:"shared,omitempty"`
	// Permits (Acquire only): the semaphore's N: at most Permits shared
	// holders of the key at any instant (0: a read lock, no bound).
	Permits int `json:"permits,omitempty"`
	// Fenced (Write only): true for a write to the fenced store, false for
	// the unfenced store.
	Fenced bool `json:"fenced,omitempty"`
	// StoreSeq (Write only) is, for an OK write, the order in which its store
	// applied it: increasing per store, 0 when not applied.
	StoreSeq uint64 `json:"seq,omitempty"`
	// Holders (Read only, OK) are the fencing tokens of the holders the
	// read was shown, oldest grant first; empty when the key was free.
	Holders []uint64 `json:"holders,omitempty"`
	// Joint (Acquire only), when not zero, ties the ops of one
	// multi-key acquire (AcquireAll): one op per key, each with its
	// key's token, all with the same Joint, Start, End and outcome, as
	// they took effect together. Checkers of one key read each op alone;
	// the joint linearizability search (check/linearize) takes them as
	// one operation with one linearization point.
	Joint uint64 `json:"joint,omitempty"`
}

func (o Op) String() string {
	s := fmt.Sprintf("client %d %s %q [%v, %v]", o.Client, o.Kind, o.Key, o.Start, o.End)
	switch {
	case o.Unknown:
		s += " unknown"
	case o.OK:
		s += " ok"
	default:
		s += " failed"
	}
	if o.Token != 0 {
		s += fmt.Sprintf(" token %d", o.Token)
	}
	return s
}

// History is everything a campaign recorded, in any order.
type History []Op

// Span returns the earliest Start and the latest End of the history.
func (h History) Span() (start, end time.Duration) {
	for i, o := range h {
		if i == 0 || o.Start < start {
			start = o.Start
		}
		if i == 0 || o.End > end {
			end = o.End
		}
	}
	return start, end
}

// Fault is an injected fault: Start is when it was injected, Heal when it
// was healed.
type Fault struct {
	Name  string        `json:"name"`
	Start time.Duration `json:"start"`
	Heal  time.Duration `json:"heal"`
}

// Options tune Check. The zero value is usable.
type Options struct {
	// Gap is the longest interval without a successful acquire that still
	// counts as available (default 1 s).
	Gap time.Duration
	// LinearizabilityTimeout bounds porcupine's search over all keys (0:
	// default 5 min; negative: no bound). A key whose search has not
	// finished by then is Unknown: Linearizable is false, and
	// LinearizabilityResult porcupine.Unknown unless another key is
	// Illegal.
	LinearizabilityTimeout time.Duration
	// LinearizabilityKeyTimeout bounds the search of one key in Check
	// (0: default 1 min; negative: only LinearizabilityTimeout bounds it).
	LinearizabilityKeyTimeout time.Duration
	// LinearizabilityMemory bounds the process's live heap while the
	// keys are searched, in bytes (0: default 4 GiB; negative: no bound):
	// past it the largest running search is given up and its key is not
	// checked (linearize.LinearizabilityByKey).
	LinearizabilityMemory int64
	// NoTokens skips the token check: the history's tokens were not given
	// by the backend (a lock without fencing tokens, whose campaign numbers
	// the grants itself).
	NoTokens bool
	// ExpirySlack is how much earlier than call+TTL the backend may expire a
	// lease in the linearizability model (its clock may run faster than the
	// campaign's). Nil means the lock contract's drift allowance,
	// lock.Drift(ttl, 0) = 1% of the TTL + 2 ms.
	ExpirySlack func(ttl time.Duration) time.Duration
	// MaxExamples bounds Result.OverlapExamples (default 5).
	MaxExamples int
}

func (o Options) WithDefaults() Options {
	if o.Gap <= 0 {
		o.Gap = time.Second
	}
	if o.LinearizabilityTimeout == 0 {
		o.LinearizabilityTimeout = 5 * time.Minute
	}
	if o.LinearizabilityTimeout < 0 {
		o.LinearizabilityTimeout = 0
	}
	if o.LinearizabilityKeyTimeout == 0 {
		o.LinearizabilityKeyTimeout = time.Minute
	}
	if o.LinearizabilityKeyTimeout < 0 {
		o.LinearizabilityKeyTimeout = 0
	}
	if o.LinearizabilityMemory == 0 {
		o.LinearizabilityMemory = 4 << 30
	}
	if o.MaxExamples <= 0 {
		o.MaxExamples = 5
	}
	return o
}
