package lock_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
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
			got, err := tc.opts.Normalize("k", "me")
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

func TestParseMode(t *testing.T) {
	for _, s := range []string{"", "exclusive", "shared"} {
		m, err := lock.ParseMode(s)
		if err != nil {
			t.Errorf("ParseMode(%q): %v", s, err)
		}
		if s != "" && m.String() != s {
			t.Errorf("ParseMode(%q).String() = %q", s, m)
		}
	}
	if _, err := lock.ParseMode("read"); !errors.Is(err, lock.ErrInvalidMode) {
		t.Errorf("ParseMode(read): %v, want %v", err, lock.ErrInvalidMode)
	}
	if s := lock.Mode(7).String(); s != "mode(7)" {
		t.Errorf("Mode(7) = %q", s)
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
			err := lock.ValidateKeys(tc.keys)
			if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
				t.Fatalf("ValidateKeys: %v, want %v", err, tc.want)
			}
			if errors.Is(tc.want, lock.ErrInvalidKeys) && errors.Is(err, lock.ErrInvalidKey) {
				t.Errorf("a bad key set matches ErrInvalidKey too: %v", err)
			}
		})
	}
}

func TestFeaturesNames(t *testing.T) {
	for _, tc := range []struct {
		f     lock.Features
		names []string
		str   string
	}{
		{0, nil, "none"},
		{lock.FeatureWatch, []string{"watch"}, "watch"},
		{lock.FeatureLockDelay | lock.FeatureShared, []string{"shared", "lockdelay"}, "shared,lockdelay"},
		{lock.AllFeatures, []string{"shared", "semaphore", "multikey", "watch", "lockdelay"}, "shared,semaphore,multikey,watch,lockdelay"},
	} {
		if got := tc.f.Names(); !slices.Equal(got, tc.names) {
			t.Errorf("%d.Names() = %v, want %v", tc.f, got, tc.names)
		}
		if got := tc.f.String(); got != tc.str {
			t.Errorf("%d.String() = %q, want %q", tc.f, got, tc.str)
		}
		back, unknown := lock.ParseFeatures(tc.f.Names())
		if back != tc.f || len(unknown) != 0 {
			t.Errorf("ParseFeatures(%v) = %v, %v; want %v", tc.f.Names(), back, unknown, tc.f)
		}
	}
	f, unknown := lock.ParseFeatures([]string{" shared", "teleport", "", "watch "})
	if f != lock.FeatureShared|lock.FeatureWatch || !slices.Equal(unknown, []string{"teleport"}) {
		t.Errorf("ParseFeatures with an unknown name = %v, %v", f, unknown)
	}
	if !lock.AllFeatures.Has(lock.FeatureShared|lock.FeatureWatch) || lock.FeatureShared.Has(lock.FeatureShared|lock.FeatureWatch) || !lock.Features(0).Has(0) {
		t.Error("Has is wrong")
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
		if got := tc.opts.Needs(); got != tc.want {
			t.Errorf("%+v.Needs() = %v, want %v", tc.opts, got, tc.want)
		}
	}
	if err := lock.CheckSupported("b", lock.AllFeatures, lock.AllFeatures, nil); err != nil {
		t.Errorf("CheckSupported with every feature: %v", err)
	}
	if err := lock.CheckSupported("b", 0, 0, nil); err != nil {
		t.Errorf("CheckSupported of nothing: %v", err)
	}
	err := lock.CheckSupported("redlock", lock.FeatureShared, lock.FeatureShared|lock.FeatureWatch|lock.FeatureLockDelay,
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

// bare is a Locker that offers no primitive, but (wrongly) has the methods:
// the helpers must go by FeaturesOf, not by the method set.
type bare struct{ lock.Locker }

func (bare) AcquireAll(context.Context, []string, lock.AcquireOptions) ([]*lock.Lease, error) {
	panic("AcquireAll called on a Locker without FeatureMultiKey")
}

func (bare) TryAcquireAll(context.Context, []string, lock.AcquireOptions) ([]*lock.Lease, error) {
	panic("TryAcquireAll called on a Locker without FeatureMultiKey")
}

func (bare) Watch(context.Context, string) (<-chan lock.Event, error) {
	panic("Watch called on a Locker without FeatureWatch")
}

func TestHelpersOnLockerWithoutFeature(t *testing.T) {
	ctx := context.Background()
	for name, l := range map[string]lock.Locker{
		"no methods":        locktest.NewMemStore().NewLocker(), // wrapped below: hides the methods
		"methods, no flags": bare{locktest.NewMemStore().NewLocker()},
		"mem without":       locktest.NewMemStoreWithFeatures(lock.FeatureShared).NewLocker(),
	} {
		if name == "no methods" {
			l = struct{ lock.Locker }{l}
		}
		t.Run(name, func(t *testing.T) {
			if f := lock.FeaturesOf(l); f.Has(lock.FeatureMultiKey) || f.Has(lock.FeatureWatch) {
				t.Fatalf("FeaturesOf = %v", f)
			}
			leases, err := lock.AcquireAll(ctx, l, []string{"a", "b"}, lock.AcquireOptions{})
			if leases != nil || !errors.Is(err, lock.ErrUnsupported) {
				t.Errorf("AcquireAll: %v, %v; want %v", leases, err, lock.ErrUnsupported)
			}
			var ue *lock.UnsupportedError
			if errors.As(err, &ue) && ue.Feature != lock.FeatureMultiKey {
				t.Errorf("AcquireAll's error names %v", ue.Feature)
			}
			ch, err := lock.Watch(ctx, l, "a")
			if ch != nil || !errors.Is(err, lock.ErrUnsupported) {
				t.Errorf("Watch: %v; want %v", err, lock.ErrUnsupported)
			}
			// Nothing was taken: the keys are free.
			for _, k := range []string{"a", "b"} {
				if _, err := l.Inspect(ctx, k); !errors.Is(err, lock.ErrNotFound) {
					t.Errorf("Inspect(%q): %v, want %v", k, err, lock.ErrNotFound)
				}
			}
		})
	}
	// With the feature, the helpers reach the Locker.
	l := locktest.NewMemStore().NewLocker()
	defer l.Close()
	leases, err := lock.AcquireAll(ctx, l, []string{"a", "b"}, lock.AcquireOptions{TTL: time.Minute})
	if err != nil || len(leases) != 2 {
		t.Fatalf("AcquireAll on a MemStore: %v, %v", leases, err)
	}
	if err := lock.ReleaseAll(ctx, l, leases); err != nil {
		t.Errorf("ReleaseAll: %v", err)
	}
	err = lock.ReleaseAll(ctx, l, leases)
	if !errors.Is(err, lock.ErrNotHeld) || !strings.Contains(err.Error(), `release "a"`) || !strings.Contains(err.Error(), `release "b"`) {
		t.Errorf("second ReleaseAll: %v, want ErrNotHeld naming both keys", err)
	}
	wctx, cancel := context.WithCancel(ctx)
	ch, err := lock.Watch(wctx, l, "a")
	if err != nil {
		t.Fatalf("Watch on a MemStore: %v", err)
	}
	if ev := <-ch; ev.Type != lock.EventSynced {
		t.Errorf("first event of a free key: %v, want synced", ev.Type)
	}
	cancel()
	for range ch {
	}
}

func TestEventTypeAndErrors(t *testing.T) {
	for typ, want := range map[lock.EventType]string{
		lock.EventHolder: "holder", lock.EventSynced: "synced", lock.EventGranted: "granted",
		lock.EventReleased: "released", lock.EventExpired: "expired", lock.EventError: "error", 99: "event(99)",
	} {
		if typ.String() != want {
			t.Errorf("%d.String() = %q, want %q", typ, typ, want)
		}
	}
	de := &lock.DelayedError{Key: "k", Until: time.Now().Add(time.Second)}
	if !errors.Is(de, lock.ErrNotAcquired) || !strings.Contains(de.Error(), `"k"`) {
		t.Errorf("DelayedError %v does not match ErrNotAcquired or name its key", de)
	}
}
