package locktest

import (
	"bytes"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// renew: renewal keeps a lease alive past its original TTL; renewal or
// release of a released or expired lease returns ErrNotHeld, from the
// client's own bookkeeping and from the backend alike.
func (s *suite) renew(t *testing.T) {
	caps := s.f.Caps
	a, b := s.locker(t), s.locker(t)

	t.Run("KeepsAlive", func(t *testing.T) {
		key := key(t, "k")
		// Each renewal must come back within 2/3 of the TTL, or the
		// lease's own deadline passes first: with the expiry cases' short
		// TTL, one slow commit on a loaded machine (two race-enabled
		// suites on two cores) failed the case. A TTL of at least
		// renewTTL tests the same thing without that race.
		ttl := max(caps.TTL, renewTTL)
		lease := mustAcquire(t, a, key, lock.AcquireOptions{TTL: ttl, Owner: "renewer"}, time.Minute)
		first := lease.Deadline()
		// Renew at TTL/6 until well past the original TTL, so that each
		// renewal goes out with 5/6 of the lease left: a commit that took
		// over 1.3 s (a 2 s lease renewed at TTL/3, beside a second
		// race-enabled suite) let the deadline pass. The sleeps pace the
		// renewals; nothing is synchronised by them.
		for until := time.Now().Add(ttl * 5 / 2); time.Now().Before(until); {
			time.Sleep(ttl / 6)
			if err := a.Renew(ctx(t, ttl), lease, ttl); err != nil {
				t.Fatalf("Renew: %v", err)
			}
		}
		if !lease.Deadline().After(first) {
			t.Errorf("Deadline did not move: %v, first %v", lease.Deadline(), first)
		}
		s.stillHeld(t, b, lease)
		mustRelease(t, a, lease)
		select {
		case <-lease.Done():
			wantErr(t, "Err of a released lease", lease.Err(), lock.ErrReleased)
		default:
			t.Error("Done still open after Release")
		}
		wantErr(t, "Renew of a released lease", a.Renew(ctx(t, time.Minute), lease, caps.TTL), lock.ErrNotHeld)
		wantErr(t, "Release of a released lease", a.Release(ctx(t, time.Minute), lease), lock.ErrNotHeld)
		wantErr(t, "Renew of a rebuilt released lease", a.Renew(ctx(t, time.Minute), rebuild(lease), caps.TTL), lock.ErrNotHeld)
		wantErr(t, "Release of a rebuilt released lease", a.Release(ctx(t, time.Minute), rebuild(lease)), lock.ErrNotHeld)
	})

	t.Run("Expired", func(t *testing.T) {
		key := key(t, "k")
		lease := mustAcquire(t, a, key, lock.AcquireOptions{TTL: caps.TTL, Owner: "sleeper"}, time.Minute)
		s.awaitFree(t, b, key, caps.TTL+caps.ExpirySlack)
		wantErr(t, "Renew of an expired lease", a.Renew(ctx(t, time.Minute), lease, caps.TTL), lock.ErrNotHeld)
		wantErr(t, "Renew of a rebuilt expired lease", a.Renew(ctx(t, time.Minute), rebuild(lease), caps.TTL), lock.ErrNotHeld)
		wantErr(t, "Release of a rebuilt expired lease", a.Release(ctx(t, time.Minute), rebuild(lease)), lock.ErrNotHeld)
		// None of that may have revived the lock.
		free, err := b.TryAcquire(ctx(t, time.Minute), key, lock.AcquireOptions{TTL: longTTL})
		if err != nil {
			t.Fatalf("TryAcquire after the lease expired and stale renewals were refused: %v", err)
		}
		mustRelease(t, b, free)
	})
}

// awaitFree waits until Inspect reports key unheld, for at most d.
func (s *suite) awaitFree(t *testing.T, l lock.Locker, key string, d time.Duration) {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		info, err := l.Inspect(ctx(t, time.Minute), key)
		if errors.Is(err, lock.ErrNotFound) {
			return
		}
		if err != nil {
			t.Fatalf("Inspect(%q): %v", key, err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q still held %v later (token %d, expires %v)", key, d, info.Token, info.Expires)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// inspect: Inspect returns the holder's token (and owner and value where
// the backend claims them); an unheld key gives ErrNotFound.
func (s *suite) inspect(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	a, b := s.locker(t), s.locker(t)
	_, err := b.Inspect(ctx(t, time.Minute), key)
	wantErr(t, "Inspect of a key never acquired", err, lock.ErrNotFound)

	value := []byte("value-1")
	lease := mustAcquire(t, a, key, lock.AcquireOptions{TTL: longTTL, Owner: "inspected", Value: value}, time.Minute)
	before := time.Now()
	info, err := b.Inspect(ctx(t, time.Minute), key)
	if err != nil {
		t.Fatalf("Inspect of a held key: %v", err)
	}
	if info.Key != key || info.Token != lease.Token {
		t.Errorf("Inspect = key %q token %d, want %q and %d", info.Key, info.Token, key, lease.Token)
	}
	if caps.InspectOwner && info.Owner != "inspected" {
		t.Errorf("Inspect owner %q, want %q", info.Owner, "inspected")
	}
	if caps.InspectValue && !bytes.Equal(info.Value, value) {
		t.Errorf("Inspect value %q, want %q", info.Value, value)
	}
	if !info.Expires.IsZero() && !info.Expires.After(before) {
		t.Errorf("Inspect expiry %v is not in the future", info.Expires)
	}
	if strings.Contains(string(info.Value), lease.Handle) || info.Owner == lease.Handle {
		t.Error("Inspect exposes the lease handle")
	}
	mustRelease(t, a, lease)
	_, err = b.Inspect(ctx(t, time.Minute), key)
	wantErr(t, "Inspect after release", err, lock.ErrNotFound)
}

// autoRenew: an auto-renewed lease outlives several TTLs; when the lease is
// lost its Done closes with ErrNotHeld. Zero options mean DefaultTTL with
// auto-renewal.
func (s *suite) autoRenew(t *testing.T) {
	caps := s.f.Caps
	key := key(t, "k")
	a, b := s.locker(t), s.locker(t)
	// At least renewTTL, for the reason renew gives: each keep-alive
	// renewal must return within 2/3 of the TTL.
	ttl := max(caps.TTL, renewTTL)
	lease := mustAcquire(t, a, key, lock.AcquireOptions{TTL: ttl, Owner: "renewed", AutoRenew: true}, time.Minute)
	select {
	case <-lease.Done():
		t.Fatalf("auto-renewed lease ended: %v", lease.Err())
	case <-time.After(2 * ttl):
	}
	if !lease.Deadline().After(time.Now()) {
		t.Errorf("deadline %v has passed although the lease is renewed", lease.Deadline())
	}
	s.stillHeld(t, b, lease)

	// Lose the lease behind the keep-alive's back: someone with the handle
	// (an operator, a restarted copy of the client) releases it.
	if err := b.Release(ctx(t, time.Minute), rebuild(lease)); err != nil {
		t.Fatalf("Release through a rebuilt lease: %v", err)
	}
	select {
	case <-lease.Done():
		wantErr(t, "Err of the lost lease", lease.Err(), lock.ErrNotHeld)
	case <-time.After(ttl + caps.ExpirySlack):
		t.Fatalf("Done did not close within %v of the lease being lost", ttl+caps.ExpirySlack)
	}
	free, err := b.TryAcquire(ctx(t, time.Minute), key, lock.AcquireOptions{TTL: longTTL})
	if err != nil {
		t.Fatalf("TryAcquire after the auto-renewed lease was lost: %v", err)
	}
	mustRelease(t, b, free)

	t.Run("ZeroOptions", func(t *testing.T) {
		lease := mustAcquire(t, a, key+".zero", lock.AcquireOptions{}, time.Minute)
		if lease.TTL() != lock.DefaultTTL {
			t.Errorf("TTL of a lease acquired with zero options: %v, want lock.DefaultTTL %v", lease.TTL(), lock.DefaultTTL)
		}
		if lease.Owner == "" {
			t.Error("lease acquired with zero options has no owner")
		}
		mustRelease(t, a, lease)
	})
}

// invalidInput: bad input gets the specific error and changes nothing.
func (s *suite) invalidInput(t *testing.T) {
	key := key(t, "k")
	l := s.locker(t)
	c := ctx(t, time.Minute)
	long := strings.Repeat("k", lock.MaxKeyLen+1)
	ok := lock.AcquireOptions{TTL: longTTL}
	for _, tc := range []struct {
		name string
		key  string
		opts lock.AcquireOptions
		want error
	}{
		{"EmptyKey", "", ok, lock.ErrInvalidKey},
		{"LongKey", long, ok, lock.ErrInvalidKey},
		{"ControlCharInKey", "a\x00b", ok, lock.ErrInvalidKey},
		{"InvalidUTF8Key", "a\xffb", ok, lock.ErrInvalidKey},
		{"NegativeTTL", key, lock.AcquireOptions{TTL: -time.Second}, lock.ErrInvalidTTL},
		{"TinyTTL", key, lock.AcquireOptions{TTL: time.Nanosecond}, lock.ErrInvalidTTL},
		{"HugeTTL", key, lock.AcquireOptions{TTL: lock.MaxTTL + time.Second}, lock.ErrInvalidTTL},
		{"HugeValue", key, lock.AcquireOptions{TTL: longTTL, Value: make([]byte, lock.MaxValueLen+1)}, lock.ErrInvalidValue},
		{"LongOwner", key, lock.AcquireOptions{TTL: longTTL, Owner: strings.Repeat("o", lock.MaxOwnerLen+1)}, lock.ErrInvalidOwner},
	} {
		_, err := l.Acquire(c, tc.key, tc.opts)
		wantErr(t, "Acquire "+tc.name, err, tc.want)
		_, err = l.TryAcquire(c, tc.key, tc.opts)
		wantErr(t, "TryAcquire "+tc.name, err, tc.want)
	}
	var ve *lock.ValidationError
	if _, err := l.Acquire(c, "", ok); !errors.As(err, &ve) || ve.Field != "key" {
		t.Errorf("Acquire with an empty key: %v, want a *lock.ValidationError for field key", err)
	}
	_, err := l.Inspect(c, "")
	wantErr(t, "Inspect of an empty key", err, lock.ErrInvalidKey)
	wantErr(t, "Renew(nil)", l.Renew(c, nil, longTTL), lock.ErrNilLease)
	wantErr(t, "Release(nil)", l.Release(c, nil), lock.ErrNilLease)

	// The key was never taken by any of the above; a valid lease is not
	// harmed by invalid renewals.
	lease := mustAcquire(t, l, key, ok, time.Minute)
	wantErr(t, "Renew with a negative TTL", l.Renew(c, lease, -time.Second), lock.ErrInvalidTTL)
	wantErr(t, "Renew with a huge TTL", l.Renew(c, lease, lock.MaxTTL+time.Second), lock.ErrInvalidTTL)
	s.stillHeld(t, s.locker(t), lease)
	mustRelease(t, l, lease)
}
