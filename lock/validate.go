package lock

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"
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

// ValidateKey checks a key: 1..MaxKeyLen bytes of valid UTF-8 without
// control characters. The error wraps ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalid("key", key, "must not be empty", ErrInvalidKey)
	case len(key) > MaxKeyLen:
		return invalid("key", key, fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(key), MaxKeyLen), ErrInvalidKey)
	case !utf8.ValidString(key):
		return invalid("key", key, "is not valid UTF-8", ErrInvalidKey)
	case hasControl(key):
		return invalid("key", key, "contains a control character", ErrInvalidKey)
	}
	return nil
}

// ValidateTTL checks a TTL that was given explicitly: MinTTL ≤ ttl ≤ MaxTTL.
// The error wraps ErrInvalidTTL.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return invalid("ttl", ttl.String(), "must be positive", ErrInvalidTTL)
	case ttl < MinTTL:
		return invalid("ttl", ttl.String(), "is shorter than the minimum of "+MinTTL.String(), ErrInvalidTTL)
	case ttl > MaxTTL:
		return invalid("ttl", ttl.String(), "is longer than the maximum of "+MaxTTL.String(), ErrInvalidTTL)
	}
	return nil
}

// Normalize validates acquire options and fills in defaults: a zero TTL
// becomes DefaultTTL with AutoRenew, an empty Owner becomes defaultOwner.
// It returns the options to use or an error wrapping ErrInvalidKey,
// ErrInvalidTTL, ErrInvalidValue, ErrInvalidOwner, ErrInvalidHandle,
// ErrInvalidMode, ErrInvalidPermits or ErrInvalidLockDelay. It does not
// check that the backend offers the features the options need
// (CheckSupported does).
func (o AcquireOptions) Normalize(key, defaultOwner string) (_ AcquireOptions, err error) {
	if err := ValidateKey(key); err != nil {
		return o, err
	}
	switch {
	case o.Session != nil:
		// A session lease lives as long as its session: the session's TTL,
		// renewed by the session's keep-alive.
		if o.TTL != 0 && o.TTL != o.Session.TTL() {
			return o, invalid("ttl", o.TTL.String(), "a lease in a session takes the session's TTL ("+o.Session.TTL().String()+"): leave TTL zero", ErrInvalidTTL)
		}
		if err := o.Session.Err(); err != nil {
			return o, fmt.Errorf("%w: %w", ErrSessionExpired, err)
		}
		o.TTL, o.AutoRenew = o.Session.TTL(), false
		if o.Owner == "" {
			o.Owner = o.Session.Owner
		}
	case o.TTL == 0:
		o.TTL, o.AutoRenew = DefaultTTL, true
	default:
		if err := ValidateTTL(o.TTL); err != nil {
			return o, err
		}
	}
	if len(o.Value) > MaxValueLen {
		return o, invalid("value", fmt.Sprintf("(%d bytes)", len(o.Value)), fmt.Sprintf("is longer than the maximum of %d bytes", MaxValueLen), ErrInvalidValue)
	}
	if o, err = o.validatePrimitives(); err != nil {
		return o, err
	}
	if o.Handle != "" && !isHandle(o.Handle) {
		return o, invalid("handle", o.Handle, "must be 32 to 64 lowercase hex characters", ErrInvalidHandle)
	}
	if o.Owner == "" {
		o.Owner = defaultOwner
	}
	return o, ValidateOwner(o.Owner)
}

// ValidateOwner checks an owner id: at most MaxOwnerLen bytes of UTF-8
// without control characters (else a *ValidationError wrapping
// ErrInvalidOwner).
func ValidateOwner(owner string) error {
	switch {
	case len(owner) > MaxOwnerLen:
		return invalid("owner", owner, fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(owner), MaxOwnerLen), ErrInvalidOwner)
	case !utf8.ValidString(owner) || hasControl(owner):
		return invalid("owner", owner, "must be UTF-8 without control characters", ErrInvalidOwner)
	}
	return nil
}

// ValidateRenew checks Renew's arguments and resolves ttl 0 to the lease's
// current TTL. A lease whose Done is closed is refused with an error
// matching ErrNotHeld: it cannot be renewed, only acquired again.
func ValidateRenew(lease *Lease, ttl time.Duration) (time.Duration, error) {
	if err := ValidateLease(lease); err != nil {
		return 0, err
	}
	if ttl == 0 {
		ttl = lease.TTL()
	} else if err := ValidateTTL(ttl); err != nil {
		return 0, err
	}
	if err := lease.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNotHeld, err)
	}
	return ttl, nil
}

// ValidateLease checks that a lease given to Renew or Release is usable: it
// names a key (else ErrNilLease), the key passes ValidateKey, and its handle
// is at most MaxHandleLen bytes (else a *ValidationError wrapping
// ErrInvalidHandle). A lease rebuilt from a client's request is checked here
// before a backend sees it: no backend could hold such a lease, and an
// over-long field must not reach a shared write (a Raft entry, a script).
// The handle's form is not checked: a well-formed but unknown handle is
// simply not held.
func ValidateLease(lease *Lease) error {
	if lease == nil || lease.Key == "" {
		return ErrNilLease
	}
	if err := ValidateKey(lease.Key); err != nil {
		return err
	}
	if len(lease.Handle) > MaxHandleLen {
		return invalid("handle", lease.Handle, fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(lease.Handle), MaxHandleLen), ErrInvalidHandle)
	}
	return nil
}

func invalid(field, value, reason string, sentinel error) error {
	const show = 64
	if len(value) > show {
		value = value[:show] + "…"
	}
	return &ValidationError{Field: field, Value: strconv.Quote(value), Reason: reason, Err: sentinel}
}

func isHandle(h string) bool {
	if len(h) < MinHandleLen || len(h) > MaxHandleLen {
		return false
	}
	for i := 0; i < len(h); i++ {
		if c := h[i]; !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}

func hasControl(s string) bool {
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return true
		}
	}
	return false
}

// ValidateClientConfig checks the two settings every backend's Config
// shares, whatever the backend: the drift factor (in [0, 0.5): a lease
// whose drift allowance were half its TTL or more would be over before it
// began) and the client id (an owner: at most MaxOwnerLen bytes). The
// error names the field; a backend prefixes it with its Config's name.
func ValidateClientConfig(driftFactor float64, clientID string) error {
	if driftFactor < 0 || driftFactor >= 0.5 {
		return fmt.Errorf("DriftFactor: %v is outside [0, 0.5)", driftFactor)
	}
	if len(clientID) > MaxOwnerLen {
		return fmt.Errorf("ClientID: %d bytes, longer than the maximum of %d", len(clientID), MaxOwnerLen)
	}
	return nil
}
