package kit_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func TestValidateKey(t *testing.T) {
	for _, tc := range []struct {
		key  string
		want error
	}{
		{"jobs/nightly", nil},
		{strings.Repeat("k", lock.MaxKeyLen), nil},
		{"ключ", nil},
		{"", lock.ErrInvalidKey},
		{strings.Repeat("k", lock.MaxKeyLen+1), lock.ErrInvalidKey},
		{"a\nb", lock.ErrInvalidKey},
		{"a\x7fb", lock.ErrInvalidKey},
		{"\xc3\x28", lock.ErrInvalidKey},
	} {
		err := kit.ValidateKey(tc.key)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("ValidateKey(%q) = %v, want %v", tc.key, err, tc.want)
		}
	}
	err := kit.ValidateKey(strings.Repeat("x", 1000))
	var ve *lock.ValidationError
	if !errors.As(err, &ve) || ve.Field != "key" || !strings.Contains(err.Error(), "1000 bytes") || len(err.Error()) > 200 {
		t.Errorf("error for an over-long key does not say what is wrong in a readable length: %v", err)
	}
}

func TestValidateTTL(t *testing.T) {
	for _, tc := range []struct {
		ttl  time.Duration
		want error
	}{
		{time.Second, nil},
		{lock.MinTTL, nil},
		{lock.MaxTTL, nil},
		{0, lock.ErrInvalidTTL},
		{-time.Second, lock.ErrInvalidTTL},
		{lock.MinTTL - 1, lock.ErrInvalidTTL},
		{lock.MaxTTL + 1, lock.ErrInvalidTTL},
	} {
		err := kit.ValidateTTL(tc.ttl)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("ValidateTTL(%v) = %v, want %v", tc.ttl, err, tc.want)
		}
	}
}

func TestNormalize(t *testing.T) {
	o, err := kit.Normalize(lock.AcquireOptions{}, "k", "client-1")
	if err != nil {
		t.Fatal(err)
	}
	if o.TTL != lock.DefaultTTL || !o.AutoRenew || o.Owner != "client-1" {
		t.Errorf("zero options normalised to %+v, want DefaultTTL, AutoRenew, the default owner", o)
	}
	o, err = kit.Normalize(lock.AcquireOptions{TTL: time.Second, Owner: "alice"}, "k", "client-1")
	if err != nil || o.TTL != time.Second || o.AutoRenew || o.Owner != "alice" {
		t.Errorf("explicit options normalised to %+v, %v", o, err)
	}
	for _, tc := range []struct {
		opts lock.AcquireOptions
		want error
	}{
		{lock.AcquireOptions{TTL: -1}, lock.ErrInvalidTTL},
		{lock.AcquireOptions{Value: make([]byte, lock.MaxValueLen+1)}, lock.ErrInvalidValue},
		{lock.AcquireOptions{Owner: strings.Repeat("o", lock.MaxOwnerLen+1)}, lock.ErrInvalidOwner},
		{lock.AcquireOptions{Owner: "bad\towner"}, lock.ErrInvalidOwner},
	} {
		if _, err := kit.Normalize(tc.opts, "k", "c"); !errors.Is(err, tc.want) {
			t.Errorf("Normalize(%+v) = %v, want %v", tc.opts, err, tc.want)
		}
	}
}

func TestValidateRenew(t *testing.T) {
	if _, err := kit.ValidateRenew(nil, time.Second); !errors.Is(err, lock.ErrNilLease) {
		t.Errorf("ValidateRenew(nil) = %v", err)
	}
	l := kit.NewLease(kit.Grant{Key: "k", TTL: 3 * time.Second, Sent: time.Now()})
	if ttl, err := kit.ValidateRenew(l, 0); err != nil || ttl != 3*time.Second {
		t.Errorf("ValidateRenew(ttl 0) = %v, %v; want the lease's TTL", ttl, err)
	}
	if _, err := kit.ValidateRenew(l, -time.Second); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Errorf("ValidateRenew(-1s) = %v", err)
	}
}

func TestNormalizeHandle(t *testing.T) {
	if _, err := kit.Normalize(lock.AcquireOptions{Handle: lock.NewHandle()}, "k", "c"); err != nil {
		t.Errorf("a NewHandle handle was refused: %v", err)
	}
	for _, h := range []string{"abc", strings.Repeat("A", 32), strings.Repeat("g", 32), strings.Repeat("a", 65)} {
		if _, err := kit.Normalize(lock.AcquireOptions{Handle: h}, "k", "c"); err == nil {
			t.Errorf("handle %q accepted", h)
		}
	}
}

// TestValidateLease: Renew and Release check the key and the handle's length
// of a lease (typically rebuilt from a client's request) before a backend
// sees them (an over-long lock token in a release once reached the
// Raft log and failed every op batched with it). Each limit at max-1, max
// and max+1.
func TestValidateLease(t *testing.T) {
	lease := func(key, handle string) *lock.Lease {
		return kit.NewLease(kit.Grant{Key: key, Token: 1, Handle: handle, TTL: time.Minute, Sent: time.Now()})
	}
	h := lock.NewHandle()
	for _, tc := range []struct {
		name  string
		lease *lock.Lease
		want  error
		field string
	}{
		{"nil", nil, lock.ErrNilLease, ""},
		{"no key", lease("", h), lock.ErrNilLease, ""},
		{"key max-1", lease(strings.Repeat("k", lock.MaxKeyLen-1), h), nil, ""},
		{"key max", lease(strings.Repeat("k", lock.MaxKeyLen), h), nil, ""},
		{"key max+1", lease(strings.Repeat("k", lock.MaxKeyLen+1), h), lock.ErrInvalidKey, "key"},
		{"key control", lease("a\x01", h), lock.ErrInvalidKey, "key"},
		{"key invalid UTF-8", lease("a\xff", h), lock.ErrInvalidKey, "key"},
		{"handle max-1", lease("k", strings.Repeat("a", lock.MaxHandleLen-1)), nil, ""},
		{"handle max", lease("k", strings.Repeat("a", lock.MaxHandleLen)), nil, ""},
		{"handle max+1", lease("k", strings.Repeat("a", lock.MaxHandleLen+1)), lock.ErrInvalidHandle, "handle"},
		{"handle 300", lease("k", strings.Repeat("a", 300)), lock.ErrInvalidHandle, "handle"},
		// A short or odd handle cannot be anyone's, but it is harmless:
		// the backend answers that the lease is not held.
		{"handle short", lease("k", "x"), nil, ""},
	} {
		err := kit.ValidateLease(tc.lease)
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: ValidateLease = %v, want %v", tc.name, err, tc.want)
			continue
		}
		var ve *lock.ValidationError
		if tc.field != "" && (!errors.As(err, &ve) || ve.Field != tc.field || len(err.Error()) > 200) {
			t.Errorf("%s: ValidateLease = %#v, want a short *ValidationError for %s", tc.name, err, tc.field)
		}
		if tc.lease != nil && tc.lease.Key != "" {
			if _, rerr := kit.ValidateRenew(tc.lease, time.Second); !errors.Is(rerr, tc.want) || (tc.want == nil) != (rerr == nil) {
				t.Errorf("%s: ValidateRenew = %v, want %v", tc.name, rerr, tc.want)
			}
		}
	}
}

// TestValidateClientConfig: the shared Config checks accept the defaults
// and the edges inside, and refuse a drift factor outside [0, 0.5) and an
// over-long client id, naming the field.
func TestValidateClientConfig(t *testing.T) {
	for _, ok := range []struct {
		drift float64
		id    string
	}{{0, ""}, {lock.DefaultDriftFactor, "c"}, {0.499, strings.Repeat("x", lock.MaxOwnerLen)}} {
		if err := kit.ValidateClientConfig(ok.drift, ok.id); err != nil {
			t.Errorf("kit.ValidateClientConfig(%v, %d bytes) = %v", ok.drift, len(ok.id), err)
		}
	}
	for _, bad := range []struct {
		drift float64
		id    string
		field string
	}{{-0.01, "", "DriftFactor"}, {0.5, "", "DriftFactor"}, {0, strings.Repeat("x", lock.MaxOwnerLen+1), "ClientID"}} {
		if err := kit.ValidateClientConfig(bad.drift, bad.id); err == nil || !strings.HasPrefix(err.Error(), bad.field+":") {
			t.Errorf("kit.ValidateClientConfig(%v, %d bytes) = %v, want an error naming %s", bad.drift, len(bad.id), err, bad.field)
		}
	}
}

func TestValidatePrefix(t *testing.T) {
	for _, p := range []string{"", "a", "orders/", strings.Repeat("k", lock.MaxKeyLen), "ключ/"} {
		if err := kit.ValidatePrefix(p); err != nil {
			t.Errorf("ValidatePrefix(%q): %v, want nil", p, err)
		}
	}
	for _, p := range []string{strings.Repeat("k", lock.MaxKeyLen+1), "a\x00", "\xff", "x\n"} {
		if err := kit.ValidatePrefix(p); !errors.Is(err, lock.ErrInvalidKey) {
			t.Errorf("ValidatePrefix(%q): %v, want %v", p, err, lock.ErrInvalidKey)
		}
	}
}
