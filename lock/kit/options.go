package kit

import (
	"fmt"

	"github.com/lockgate/lockgate/lock"
)

// Needs returns the features the options ask for: lock.FeatureShared for
// a shared lock, lock.FeatureSemaphore for permits, lock.FeatureLockDelay
// for a delay, lock.FeatureSessions for a lease in a session.
func Needs(o lock.AcquireOptions) lock.Features {
	var f lock.Features
	switch {
	case o.Permits > 0:
		f |= lock.FeatureSemaphore
	case o.Mode == lock.ModeShared:
		f |= lock.FeatureShared
	}
	if o.LockDelay > 0 {
		f |= lock.FeatureLockDelay
	}
	if o.Session != nil {
		f |= lock.FeatureSessions
	}
	return f
}

// CheckSupported returns a *lock.UnsupportedError naming the first feature
// of need that have lacks, or nil. reason, if not nil, gives the backend's
// reason for a missing feature.
func CheckSupported(backend string, have, need lock.Features, reason func(lock.Features) string) error {
	// One bit per feature, in the order lock.Features.Names lists them;
	// a bit with no name is no feature this package knows.
	for f := lock.Features(1); f != 0 && f <= need; f <<= 1 {
		if need&f != 0 && have&f == 0 && f.Names() != nil {
			e := &lock.UnsupportedError{Backend: backend, Feature: f}
			if reason != nil {
				e.Reason = reason(f)
			}
			return e
		}
	}
	return nil
}

// validatePrimitives checks the options beyond the exclusive lock (mode,
// permits, lock-delay) and normalizes a semaphore's mode to
// lock.ModeShared; Normalize calls it.
func validatePrimitives(o lock.AcquireOptions) (lock.AcquireOptions, error) {
	if o.Mode != lock.ModeExclusive && o.Mode != lock.ModeShared {
		return o, invalid("mode", o.Mode.String(), `must be exclusive (0) or shared (1)`, lock.ErrInvalidMode)
	}
	switch {
	case o.Permits < 0:
		return o, invalid("permits", fmt.Sprint(o.Permits), "must not be negative", lock.ErrInvalidPermits)
	case o.Permits > lock.MaxPermits:
		return o, invalid("permits", fmt.Sprint(o.Permits), fmt.Sprintf("is above the maximum of %d", lock.MaxPermits), lock.ErrInvalidPermits)
	case o.Permits > 0:
		o.Mode = lock.ModeShared // a permit is a shared hold, limited to Permits holders
	}
	switch {
	case o.LockDelay < 0:
		return o, invalid("lock_delay", o.LockDelay.String(), "must not be negative", lock.ErrInvalidLockDelay)
	case o.LockDelay > lock.MaxLockDelay:
		return o, invalid("lock_delay", o.LockDelay.String(), "is longer than the maximum of "+lock.MaxLockDelay.String(), lock.ErrInvalidLockDelay)
	}
	return o, nil
}

// ValidateKeys checks AcquireAll's keys: 1..MaxMultiKeys keys, each valid
// (ValidateKey), none twice. The error wraps lock.ErrInvalidKeys, or
// lock.ErrInvalidKey for a bad key.
func ValidateKeys(keys []string) error {
	switch {
	case len(keys) == 0:
		return invalid("keys", "[]", "must name at least one key", lock.ErrInvalidKeys)
	case len(keys) > lock.MaxMultiKeys:
		return invalid("keys", fmt.Sprintf("(%d keys)", len(keys)), fmt.Sprintf("are more than the maximum of %d", lock.MaxMultiKeys), lock.ErrInvalidKeys)
	}
	seen := make(map[string]struct{}, len(keys))
	for _, k := range keys {
		if err := ValidateKey(k); err != nil {
			return err
		}
		if _, dup := seen[k]; dup {
			return invalid("keys", k, "is listed twice", lock.ErrInvalidKeys)
		}
		seen[k] = struct{}{}
	}
	return nil
}
