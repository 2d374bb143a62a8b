package lock_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

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
