// Package lock defines the contract that every lockgate backend implements:
// a Locker that grants leases on keys, each lease carrying a fencing token.
//
// The package does no I/O. Backends (raftlock, redlock, sqllock, zklike), the
// gateway's Go client and the in-memory reference locker of lock/locktest all
// implement Locker, and all of them pass the same conformance suite,
// locktest.Run.
//
// # Guarantees every implementation gives
//
//   - At most one live lease per key at any instant, as judged by the
//     backend's own clock (what each backend's clock assumptions are is in
//     docs/backends.md).
//   - Fencing tokens strictly increase across successive grants of the same
//     key and are never issued twice for that key, even across restarts.
//   - A lease whose holder crashes is freed by the backend once its TTL
//     passes.
//   - A caller whose context ends while waiting is never left holding the
//     lock (no ghost grants).
//   - A lease is identified by (Key, Token, Handle), never by pointer: a Lease
//     rebuilt from those fields (NewLease of lock/kit) renews and releases
//     the same grant. The gateway's REST API relies on this.
//
// # The holder's view of time
//
// The holder may act on a lease only until Lease.Deadline, computed on the
// holder's monotonic clock as
//
//	deadline = sent + ttl − drift(ttl),   drift(ttl) = ttl·DriftFactor + DriftFloor
//
// where sent is the instant the granting (or renewing) request was sent — an
// instant that precedes the start of the backend's TTL for the grant — and
// the drift allowance covers the rate difference between the holder's clock
// and the backend's (see Drift). Lease.Done closes when the deadline
// passes, when a renewal is refused, or when the lease is released.
//
// This package is what an application calls. Whoever implements a Locker
// (a backend, the gateway, the SDK) also uses lock/kit: the checks of a
// request, and the building of the Lease and Session it hands out.
package lock

import (
	"context"
	"fmt"
	"time"
)

// Token is a fencing token: it strictly increases across successive grants of
// the same key and is never issued twice for that key. A resource that
// remembers the highest token it has seen for a key and rejects lower ones is
// safe against holders that lost their lease without knowing it.
type Token uint64

// String formats the token as a decimal number.
func (t Token) String() string { return fmt.Sprintf("%d", uint64(t)) }

// Locker grants leases on keys. Implementations are safe for concurrent use
// by many goroutines; each Locker is one client of its backend.
//
// Every method that can block takes a context first. When ctx has no
// deadline, implementations bound each network round trip themselves; the
// wait in Acquire is bounded only by ctx.
type Locker interface {
	// Acquire blocks until the key is granted to the caller or ctx is done.
	// When ctx ends first it returns an error that matches ctx.Err() with
	// errors.Is, and the caller holds nothing: a grant that raced with the
	// cancellation is released, never left behind.
	Acquire(ctx context.Context, key string, opts AcquireOptions) (*Lease, error)

	// TryAcquire makes one attempt. When another owner holds the key it
	// returns an error matching ErrNotAcquired (a *HeldError when the
	// backend can name the holder) without waiting for it.
	TryAcquire(ctx context.Context, key string, opts AcquireOptions) (*Lease, error)

	// Renew extends a held lease to ttl from now (ttl 0 keeps the lease's
	// current TTL) and moves its Deadline. It returns an error matching
	// ErrNotHeld when the lease expired, was released, or the key was granted
	// to someone else; a lease whose Done is already closed is never renewed.
	Renew(ctx context.Context, lease *Lease, ttl time.Duration) error

	// Release frees the lease and closes its Done. It returns an error
	// matching ErrNotHeld when the lease no longer holds the key (expired,
	// already released, or re-granted) and then changes nothing: in
	// particular it never frees another holder's grant.
	Release(ctx context.Context, lease *Lease) error

	// Inspect reports the key's current holder. A key that nobody holds
	// (never acquired, released, or expired) gives an error matching
	// ErrNotFound. The returned LockInfo never contains the lease Handle.
	Inspect(ctx context.Context, key string) (*LockInfo, error)

	// Close releases the Locker's resources. Waiting Acquire calls return
	// ErrClosed, later calls return ErrClosed, and auto-renewal stops (held
	// leases then run out at their deadline unless released first). Close is
	// idempotent.
	Close() error
}

// AcquireOptions are the per-acquisition settings. The zero value asks for
// the backend's default TTL with automatic renewal (the one-call lock of
// simple lock APIs: take it, use it, let it renew).
type AcquireOptions struct {
	// TTL is how long the lease lives without renewal. Zero means DefaultTTL
	// with AutoRenew; negative or above the maximum is ErrInvalidTTL.
	TTL time.Duration

	// Value is stored with the lock and returned by Inspect (where the
	// backend supports it); at most MaxValueLen bytes.
	Value []byte

	// Mode is ModeExclusive (the zero value: a mutex) or ModeShared (a
	// read lock: any number of shared holders, no exclusive one). Needs
	// FeatureShared. Waiters of both modes are served in one FIFO order, so
	// that a waiting exclusive caller is not starved by later shared ones.
	Mode Mode

	// Permits, when positive, makes the key a semaphore of Permits holders
	// and this acquire one of them (Mode becomes ModeShared). The first
	// holder fixes N; while the key has holders, an acquire with another N
	// fails with ErrPermitsMismatch. Each permit is a lease with its own
	// token and TTL. At most MaxPermits. Needs FeatureSemaphore.
	Permits int

	// LockDelay, when positive, keeps the key from being granted again for
	// this long after this lease ends by expiry (not by release): a holder
	// that was paused and cannot be fenced has that long to notice that it
	// lost the lease (Chubby's and Consul's lock-delay). At most
	// MaxLockDelay. Needs FeatureLockDelay.
	LockDelay time.Duration

	// Owner identifies the client. Empty means the Locker's own client id.
	// Locks are not re-entrant: an owner that acquires a key it already
	// holds waits like anyone else.
	Owner string

	// AutoRenew keeps the lease alive by renewing it at TTL/3 until it is
	// released, the Locker is closed, or a renewal is refused (see
	// KeepAlive).
	AutoRenew bool

	// Session, when not nil, puts the lease in that session (needs
	// FeatureSessions): it lives as long as the session, renewed by the
	// session's keep-alive, with the session's TTL (leave TTL zero;
	// AutoRenew is ignored) and, when Owner is empty, its owner. Its Done
	// closes when the session ends.
	Session *Session

	// Handle, if set, is a caller-chosen lease handle (32 to 64 lowercase
	// hex characters, at least 128 random bits: NewHandle makes one). A
	// re-sent acquire with the same handle is idempotent where the backend
	// supports it (raftlock): if the first copy was granted, the re-sent
	// one returns that grant instead of waiting behind it. Backends that
	// do not support it mint their own handle.
	Handle string

	// Identity is the named identity of the caller, as the gateway's
	// credential check found it (docs/security.md, "Tenants"); never a
	// client's own word. A backend that records identities
	// (IdentityRecorder) keeps it with the lease; others ignore it.
	Identity string
}

// LockInfo is what Inspect reports about a held key.
type LockInfo struct {
	Key   string
	Owner string // empty when the backend does not record owners
	Token Token
	Value []byte // nil when the backend does not store values
	// Expires is the backend's estimate of when the lease ends, translated
	// to the caller's clock; informational only, never a safety bound.
	Expires time.Time
	// Waiters is the number of callers queued for the key, or -1 when the
	// backend cannot tell.
	Waiters int
	// Mode is how the key is held; for a shared key (read lock or
	// semaphore) Owner, Token, Value and Expires describe its oldest
	// holder, and Holders lists them all.
	Mode Mode
	// Permits is the semaphore's N (0 for a mutex or read lock).
	Permits int
	// Holders lists every current holder, oldest grant first, on backends
	// with FeatureShared or FeatureSemaphore (nil elsewhere).
	Holders []HolderInfo
}

// HolderInfo is one holder of a key, as LockInfo.Holders lists them.
type HolderInfo struct {
	Owner   string
	Token   Token
	Value   []byte
	Expires time.Time
}

// WantedSignaler is implemented by a Locker whose backend tells a holder
// that another contender waits for its key (Lease.Wanted). A Locker that
// does not implement it, or reports false, never closes Wanted: its holders
// cannot learn that they are wanted and must release on their own.
type WantedSignaler interface {
	SignalsWanted() bool
}

// SignalsWanted reports whether l's leases are told when they are wanted.
func SignalsWanted(l Locker) bool {
	w, ok := l.(WantedSignaler)
	return ok && w.SignalsWanted()
}
