package kit_test

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func TestNormalizePrimitives(t *testing.T) {
	for _, tc := range []struct {
		name     string
		opts     lock.AcquireOptions
		want     error
		wantMode lock.Mode
	}{
		{"exclusive", lock.AcquireOptions{}, nil, lock.ModeExclusive},
		{"shared", lock.AcquireOptions{Mode: lock.ModeShared}, nil, lock.ModeShared},
		{"mode 2", lock.AcquireOptions{Mode: 2}, lock.ErrInvalidMode, 0},
		{"mode 255", lock.AcquireOptions{Mode: 255, Permits: 3}, lock.ErrInvalidMode, 0},
		{"permits make it shared", lock.AcquireOptions{Permits: 3}, nil, lock.ModeShared},
		{"max permits", lock.AcquireOptions{Permits: lock.MaxPermits}, nil, lock.ModeShared},
		{"negative permits", lock.AcquireOptions{Permits: -1}, lock.ErrInvalidPermits, 0},
		{"too many permits", lock.AcquireOptions{Permits: lock.MaxPermits + 1}, lock.ErrInvalidPermits, 0},
		{"lock delay", lock.AcquireOptions{LockDelay: time.Second}, nil, lock.ModeExclusive},
		{"max lock delay", lock.AcquireOptions{LockDelay: lock.MaxLockDelay}, nil, lock.ModeExclusive},
		{"negative lock delay", lock.AcquireOptions{LockDelay: -time.Millisecond}, lock.ErrInvalidLockDelay, 0},
		{"too long lock delay", lock.AcquireOptions{LockDelay: lock.MaxLockDelay + 1}, lock.ErrInvalidLockDelay, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := kit.Normalize(tc.opts, "k", "me")
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("Normalize: %v, want %v", err, tc.want)
			}
			if err != nil {
				var ve *lock.ValidationError
				if !errors.As(err, &ve) {
					t.Errorf("error %T is not a *ValidationError", err)
				}
				return
			}
			if got.Mode != tc.wantMode {
				t.Errorf("Mode %v, want %v", got.Mode, tc.wantMode)
			}
		})
	}
}

func TestValidateKeys(t *testing.T) {
	many := func(n int) []string {
		ks := make([]string, n)
		for i := range ks {
			ks[i] = fmt.Sprintf("k%d", i)
		}
		return ks
	}
	for _, tc := range []struct {
		name string
		keys []string
		want error
	}{
		{"one", []string{"a"}, nil},
		{"max", many(lock.MaxMultiKeys), nil},
		{"none", nil, lock.ErrInvalidKeys},
		{"empty", []string{}, lock.ErrInvalidKeys},
		{"too many", many(lock.MaxMultiKeys + 1), lock.ErrInvalidKeys},
		{"twice", []string{"a", "b", "a"}, lock.ErrInvalidKeys},
		{"bad key", []string{"a", ""}, lock.ErrInvalidKey},
		{"long key", []string{strings.Repeat("k", lock.MaxKeyLen+1)}, lock.ErrInvalidKey},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := kit.ValidateKeys(tc.keys)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("ValidateKeys: %v, want %v", err, tc.want)
			}
			if errors.Is(tc.want, lock.ErrInvalidKeys) && errors.Is(err, lock.ErrInvalidKey) {
				t.Errorf("a bad key set matches ErrInvalidKey too: %v", err)
			}
		})
	}
}

func TestNeedsAndCheckSupported(t *testing.T) {
	for _, tc := range []struct {
		opts lock.AcquireOptions
		want lock.Features
	}{
		{lock.AcquireOptions{}, 0},
		{lock.AcquireOptions{Mode: lock.ModeShared}, lock.FeatureShared},
		{lock.AcquireOptions{Permits: 2}, lock.FeatureSemaphore},
		{lock.AcquireOptions{Mode: lock.ModeShared, Permits: 2}, lock.FeatureSemaphore},
		{lock.AcquireOptions{LockDelay: time.Second}, lock.FeatureLockDelay},
		{lock.AcquireOptions{Mode: lock.ModeShared, LockDelay: time.Second}, lock.FeatureShared | lock.FeatureLockDelay},
	} {
		if got := kit.Needs(tc.opts); got != tc.want {
			t.Errorf("%+v.Needs() = %v, want %v", tc.opts, got, tc.want)
		}
	}
	if err := kit.CheckSupported("b", lock.AllFeatures, lock.AllFeatures, nil); err != nil {
		t.Errorf("CheckSupported with every feature: %v", err)
	}
	if err := kit.CheckSupported("b", 0, 0, nil); err != nil {
		t.Errorf("CheckSupported of nothing: %v", err)
	}
	err := kit.CheckSupported("redlock", lock.FeatureShared, lock.FeatureShared|lock.FeatureWatch|lock.FeatureLockDelay,
		func(f lock.Features) string { return "no " + f.String() })
	var ue *lock.UnsupportedError
	if !errors.Is(err, lock.ErrUnsupported) || !errors.As(err, &ue) {
		t.Fatalf("CheckSupported of a missing feature: %v", err)
	}
	if ue.Feature != lock.FeatureWatch || ue.Backend != "redlock" || ue.Reason != "no watch" {
		t.Errorf("UnsupportedError %+v, want the first missing feature (watch) with its reason", ue)
	}
	if msg := err.Error(); !strings.Contains(msg, "redlock does not offer watch: no watch") {
		t.Errorf("message %q", msg)
	}
}
