package kit

import (
	"fmt"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/lockgate/lockgate/lock"
)

// ValidateKey checks a key: 1..lock.MaxKeyLen bytes of valid UTF-8 without
// control characters. The error wraps lock.ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return invalid("key", key, "must not be empty", lock.ErrInvalidKey)
	case len(key) > lock.MaxKeyLen:
		return invalid("key", key, fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(key), lock.MaxKeyLen), lock.ErrInvalidKey)
	case !utf8.ValidString(key):
		return invalid("key", key, "is not valid UTF-8", lock.ErrInvalidKey)
	case hasControl(key):
		return invalid("key", key, "contains a control character", lock.ErrInvalidKey)
	}
	return nil
}

// ValidateTTL checks a TTL that was given explicitly:
// lock.MinTTL ≤ ttl ≤ lock.MaxTTL. The error wraps lock.ErrInvalidTTL.
func ValidateTTL(ttl time.Duration) error {
	switch {
	case ttl <= 0:
		return invalid("ttl", ttl.String(), "must be positive", lock.ErrInvalidTTL)
	case ttl < lock.MinTTL:
		return invalid("ttl", ttl.String(), "is shorter than the minimum of "+lock.MinTTL.String(), lock.ErrInvalidTTL)
	case ttl > lock.MaxTTL:
		return invalid("ttl", ttl.String(), "is longer than the maximum of "+lock.MaxTTL.String(), lock.ErrInvalidTTL)
	}
	return nil
}

// Normalize validates the options of an acquire of key and fills in
// defaults: a zero TTL becomes lock.DefaultTTL with AutoRenew, a lease in a
// session takes the session's TTL (and owner), an empty Owner becomes
// defaultOwner. It returns the options to use or an error wrapping
// lock.ErrInvalidKey, lock.ErrInvalidTTL, lock.ErrInvalidValue,
// lock.ErrInvalidOwner, lock.ErrInvalidHandle, lock.ErrInvalidMode,
// lock.ErrInvalidPermits, lock.ErrInvalidLockDelay or
// lock.ErrSessionExpired. It does not check that the backend offers the
// features the options need (CheckSupported does).
func Normalize(o lock.AcquireOptions, key, defaultOwner string) (_ lock.AcquireOptions, err error) {
	if err := ValidateKey(key); err != nil {
		return o, err
	}
	switch {
	case o.Session != nil:
		// A session lease lives as long as its session: the session's TTL,
		// renewed by the session's keep-alive.
		if o.TTL != 0 && o.TTL != o.Session.TTL() {
			return o, invalid("ttl", o.TTL.String(), "a lease in a session takes the session's TTL ("+o.Session.TTL().String()+"): leave TTL zero", lock.ErrInvalidTTL)
		}
		if err := o.Session.Err(); err != nil {
			return o, fmt.Errorf("%w: %w", lock.ErrSessionExpired, err)
		}
		o.TTL, o.AutoRenew = o.Session.TTL(), false
		if o.Owner == "" {
			o.Owner = o.Session.Owner
		}
	case o.TTL == 0:
		o.TTL, o.AutoRenew = lock.DefaultTTL, true
	default:
		if err := ValidateTTL(o.TTL); err != nil {
			return o, err
		}
	}
	if len(o.Value) > lock.MaxValueLen {
		return o, invalid("value", fmt.Sprintf("(%d bytes)", len(o.Value)), fmt.Sprintf("is longer than the maximum of %d bytes", lock.MaxValueLen), lock.ErrInvalidValue)
	}
	if o, err = validatePrimitives(o); err != nil {
		return o, err
	}
	if o.Handle != "" && !isHandle(o.Handle) {
		return o, invalid("handle", o.Handle, "must be 32 to 64 lowercase hex characters", lock.ErrInvalidHandle)
	}
	if o.Owner == "" {
		o.Owner = defaultOwner
	}
	return o, ValidateOwner(o.Owner)
}

// ValidateOwner checks an owner id: at most lock.MaxOwnerLen bytes of UTF-8
// without control characters (else a *lock.ValidationError wrapping
// lock.ErrInvalidOwner).
func ValidateOwner(owner string) error {
	switch {
	case len(owner) > lock.MaxOwnerLen:
		return invalid("owner", owner, fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(owner), lock.MaxOwnerLen), lock.ErrInvalidOwner)
	case !utf8.ValidString(owner) || hasControl(owner):
		return invalid("owner", owner, "must be UTF-8 without control characters", lock.ErrInvalidOwner)
	}
	return nil
}

// ValidateRenew checks Renew's arguments and resolves ttl 0 to the lease's
// current TTL. A lease whose Done is closed is refused with an error
// matching lock.ErrNotHeld: it cannot be renewed, only acquired again.
func ValidateRenew(lease *lock.Lease, ttl time.Duration) (time.Duration, error) {
	if err := ValidateLease(lease); err != nil {
		return 0, err
	}
	if ttl == 0 {
		ttl = lease.TTL()
	} else if err := ValidateTTL(ttl); err != nil {
		return 0, err
	}
	if err := lease.Err(); err != nil {
		return 0, fmt.Errorf("%w: %w", lock.ErrNotHeld, err)
	}
	return ttl, nil
}

// ValidateLease checks that a lease given to Renew or Release is usable: it
// names a key (else lock.ErrNilLease), the key passes ValidateKey, and its
// handle is at most lock.MaxHandleLen bytes (else a *lock.ValidationError
// wrapping lock.ErrInvalidHandle). A lease rebuilt from a client's request
// is checked here before a backend sees it: no backend could hold such a lease, and an
// over-long field must not reach a shared write (a Raft entry, a script).
// The handle's form is not checked: a well-formed but unknown handle is
// simply not held.
func ValidateLease(lease *lock.Lease) error {
	if lease == nil || lease.Key == "" {
		return lock.ErrNilLease
	}
	if err := ValidateKey(lease.Key); err != nil {
		return err
	}
	if len(lease.Handle) > lock.MaxHandleLen {
		return invalid("handle", lease.Handle, fmt.Sprintf("is %d bytes, longer than the maximum of %d", len(lease.Handle), lock.MaxHandleLen), lock.ErrInvalidHandle)
	}
	return nil
}

// invalid builds the *lock.ValidationError of a refused field, its value
// quoted and cut short.
func invalid(field, value, reason string, sentinel error) error {
	const show = 64
	if len(value) > show {
		value = value[:show] + "…"
	}
	return &lock.ValidationError{Field: field, Value: strconv.Quote(value), Reason: reason, Err: sentinel}
}

func isHandle(h string) bool {
	if len(h) < lock.MinHandleLen || len(h) > lock.MaxHandleLen {
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

// ValidatePrefix checks a watch prefix: as ValidateKey, except that the
// empty prefix (every key) is allowed. The error is ValidateKey's (a
// *lock.ValidationError wrapping lock.ErrInvalidKey).
func ValidatePrefix(prefix string) error {
	if prefix == "" {
		return nil
	}
	return ValidateKey(prefix)
}

// ValidateSessionOptions checks a session's options (TTL 0 or within
// lock.MinTTL..lock.MaxTTL, a valid owner).
func ValidateSessionOptions(o lock.SessionOptions) error {
	if o.TTL != 0 {
		if err := ValidateTTL(o.TTL); err != nil {
			return err
		}
	}
	return ValidateOwner(o.Owner)
}

// ValidateClientConfig checks the two settings every backend's Config
// shares, whatever the backend: the drift factor (in [0, 0.5): a lease
// whose drift allowance were half its TTL or more would be over before it
// began) and the client id (an owner: at most lock.MaxOwnerLen bytes). The
// error names the field; a backend prefixes it with its Config's name.
func ValidateClientConfig(driftFactor float64, clientID string) error {
	if driftFactor < 0 || driftFactor >= 0.5 {
		return fmt.Errorf("DriftFactor: %v is outside [0, 0.5)", driftFactor)
	}
	if len(clientID) > lock.MaxOwnerLen {
		return fmt.Errorf("ClientID: %d bytes, longer than the maximum of %d", len(clientID), lock.MaxOwnerLen)
	}
	return nil
}
