package lock

import (
	"errors"
	"fmt"
	"time"
)

// Sentinel errors. Match them with errors.Is: implementations wrap them with
// detail (the key, the backend's reason) but always keep them matchable.
var (
	// ErrNotAcquired: TryAcquire found the key held by another owner.
	ErrNotAcquired = errors.New("lock: not acquired: key is held by another owner")

	// ErrNotHeld: the lease no longer holds its key. It expired, was
	// released, or the key was granted to someone else. Renew and Release
	// return it; the caller must stop acting on the lease.
	ErrNotHeld = errors.New("lock: lease is not held")

	// ErrNotFound: Inspect found no holder for the key.
	ErrNotFound = errors.New("lock: key is not held")

	// ErrUnavailable: the backend could not be reached or could not reach
	// agreement (no quorum, no leader). The operation may be retried; its
	// outcome is unknown only where the error says so.
	ErrUnavailable = errors.New("lock: backend unavailable")

	// ErrClosed: the Locker was closed.
	ErrClosed = errors.New("lock: locker is closed")

	// ErrInvalidKey: the key is empty, too long, or has bytes a key may not
	// contain. Returned wrapped in a *ValidationError.
	ErrInvalidKey = errors.New("lock: invalid key")

	// ErrInvalidTTL: the TTL is negative, below MinTTL or above MaxTTL.
	// Returned wrapped in a *ValidationError.
	ErrInvalidTTL = errors.New("lock: invalid ttl")

	// ErrInvalidValue: the value is longer than MaxValueLen.
	ErrInvalidValue = errors.New("lock: invalid value")

	// ErrInvalidOwner: the owner id is too long or has control characters.
	ErrInvalidOwner = errors.New("lock: invalid owner")

	// ErrInvalidHandle: a caller-chosen lease handle is not 32 to 64
	// lowercase hex characters.
	ErrInvalidHandle = errors.New("lock: invalid handle")

	// ErrNilLease: Renew or Release was given a nil lease (or one without a
	// key).
	ErrNilLease = errors.New("lock: nil lease")

	// ErrReleased is the Lease.Err of a lease that its holder released.
	ErrReleased = errors.New("lock: lease released")

	// ErrExpired is the Lease.Err of a lease whose deadline passed.
	ErrExpired = errors.New("lock: lease deadline passed")

	// ErrNotLeader: the node that was asked is not the leader. Returned
	// wrapped in a *NotLeaderError that names the leader when known.
	ErrNotLeader = errors.New("lock: not leader")

	// ErrQuotaExceeded: the caller's identity holds as many of something
	// (sessions, leases, waiting acquires, watches) as its quota allows
	// (docs/security.md, "Tenants"). Other identities are unaffected;
	// releasing or closing some frees room.
	ErrQuotaExceeded = errors.New("lock: quota exceeded")

	// ErrRateLimited: the caller's identity sent requests faster than its
	// rate allows; retry after the time the error names. Keep-alives and
	// renewals are never rate-limited.
	ErrRateLimited = errors.New("lock: rate limited")

	// ErrForbidden: the caller's identity may not do this on this key (the
	// policy's permissions, docs/security.md).
	ErrForbidden = errors.New("lock: forbidden")
)

// ValidationError says which input was rejected and why. It wraps one of
// ErrInvalidKey, ErrInvalidTTL, ErrInvalidValue or ErrInvalidOwner.
type ValidationError struct {
	Field  string // "key", "ttl", "value", "owner"
	Value  string // the offending input, shortened for display
	Reason string // what is wrong and what is allowed
	Err    error  // the sentinel
}

func (e *ValidationError) Error() string {
	return fmt.Sprintf("%v %s: %s", e.Err, e.Value, e.Reason)
}

// Unwrap returns the sentinel.
func (e *ValidationError) Unwrap() error { return e.Err }

// HeldError is returned by TryAcquire when another owner holds the key; it
// matches ErrNotAcquired. Fields the backend cannot know are zero.
type HeldError struct {
	Key     string
	Owner   string
	Token   Token
	Expires time.Time
}

func (e *HeldError) Error() string {
	if e.Owner == "" {
		return fmt.Sprintf("%v: key %q", ErrNotAcquired, e.Key)
	}
	return fmt.Sprintf("%v: key %q held by %q (token %d)", ErrNotAcquired, e.Key, e.Owner, e.Token)
}

// Unwrap returns ErrNotAcquired.
func (e *HeldError) Unwrap() error { return ErrNotAcquired }

// NotLeaderError redirects a caller to the leader. It matches ErrNotLeader,
// and ErrUnavailable too, so that a caller that does not follow redirects
// treats it as a retryable outage. LeaderAddr is empty when the node does
// not know the current leader.
type NotLeaderError struct {
	LeaderID   string
	LeaderAddr string // the leader's client (gateway) address
}

func (e *NotLeaderError) Error() string {
	if e.LeaderAddr == "" {
		return ErrNotLeader.Error() + ": leader unknown"
	}
	return fmt.Sprintf("%v: leader is %s at %s", ErrNotLeader, e.LeaderID, e.LeaderAddr)
}

// Unwrap returns ErrNotLeader and ErrUnavailable.
func (e *NotLeaderError) Unwrap() []error { return []error{ErrNotLeader, ErrUnavailable} }
