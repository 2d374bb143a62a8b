package lock

import (
	"strconv"
	"time"
)

// Limits and defaults shared by every backend and the gateway.
const (
	// MaxKeyLen is the longest key, in bytes.
	MaxKeyLen = 256
	// MaxOwnerLen is the longest owner (client) id, in bytes.
	MaxOwnerLen = 128
	// MaxValueLen is the largest value stored with a lock, in bytes.
	MaxValueLen = 4096
	// MinHandleLen and MaxHandleLen bound a lease handle (lock token), in
	// bytes: a caller-chosen handle is MinHandleLen to MaxHandleLen
	// lowercase hex characters (128 to 256 bits); every backend mints
	// handles in that form.
	MinHandleLen = 32
	MaxHandleLen = 64
	// MinTTL is the shortest TTL a lease may ask for. Shorter leases would be
	// eaten by the drift allowance and by one network round trip.
	MinTTL = 10 * time.Millisecond
	// MaxTTL is the longest TTL: a lease that outlives its holder by more
	// than a day is a deadlock, not a lease.
	MaxTTL = 24 * time.Hour
	// DefaultTTL is the TTL of a lease acquired without one (20 s, a
	// common default of lock services); such a lease is renewed automatically.
	DefaultTTL = 20 * time.Second
)

// invalid builds the *ValidationError of a refused field, its value quoted
// and cut short. lock/kit has its own for the checks it holds.
func invalid(field, value, reason string, sentinel error) error {
	const show = 64
	if len(value) > show {
		value = value[:show] + "…"
	}
	return &ValidationError{Field: field, Value: strconv.Quote(value), Reason: reason, Err: sentinel}
}
