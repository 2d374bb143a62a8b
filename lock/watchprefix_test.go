package lock_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// prefixOnly is a PrefixWatcher whose FeaturesOf says whether it watches.
type prefixOnly struct {
	lock.Locker
	features lock.Features
	called   *string
}

func (p prefixOnly) Features() lock.Features { return p.features }

func (p prefixOnly) WatchPrefix(_ context.Context, prefix string) (<-chan lock.Event, error) {
	*p.called = prefix
	ch := make(chan lock.Event, 1)
	ch <- lock.Event{Type: lock.EventSynced, Key: prefix, Revision: 7}
	close(ch)
	return ch, nil
}

func TestWatchPrefixHelper(t *testing.T) {
	ctx := context.Background()
	// A Locker that is no PrefixWatcher (a MemStore watches single keys only).
	ch, err := lock.WatchPrefix(ctx, locktest.NewMemStore().NewLocker(), "")
	var ue *lock.UnsupportedError
	if ch != nil || !errors.Is(err, lock.ErrUnsupported) || !errors.As(err, &ue) || ue.Feature != lock.FeatureWatchPrefix {
		t.Fatalf("WatchPrefix on a MemStore: %v, %v; want an *UnsupportedError of watchprefix", ch, err)
	}
	if !strings.Contains(err.Error(), "does not offer watchprefix") {
		t.Errorf("error %q does not say it is the prefix watch that is missing", err)
	}
	// A PrefixWatcher that does not report FeatureWatch is not called.
	var called string
	none := prefixOnly{Locker: locktest.NewMemStore().NewLocker(), called: &called}
	if _, err := lock.WatchPrefix(ctx, none, "a/"); !errors.Is(err, lock.ErrUnsupported) || called != "" {
		t.Errorf("WatchPrefix without FeatureWatch: %v (called with %q); want unsupported, not called", err, called)
	}
	// One that does is.
	called = "-"
	ok := prefixOnly{Locker: locktest.NewMemStore().NewLocker(), features: lock.FeatureWatch, called: &called}
	ch, err = lock.WatchPrefix(ctx, ok, "a/")
	if err != nil || called != "a/" {
		t.Fatalf("WatchPrefix: %v (called with %q)", err, called)
	}
	if ev := <-ch; ev.Type != lock.EventSynced || ev.Revision != 7 {
		t.Errorf("first event %+v, want the implementation's synced", ev)
	}
}

func TestFeatureWatchPrefixName(t *testing.T) {
	if lock.FeatureWatchPrefix.String() != "watchprefix" {
		t.Errorf("FeatureWatchPrefix.String() = %q", lock.FeatureWatchPrefix.String())
	}
	if f, unknown := lock.ParseFeatures([]string{"watch", "sessions", "watchprefix"}); f != lock.FeatureWatch|lock.FeatureSessions|lock.FeatureWatchPrefix || unknown != nil {
		t.Errorf("ParseFeatures: %v, unknown %v", f, unknown)
	}
	if lock.AllFeatures.Has(lock.FeatureWatchPrefix) || lock.FeatureWatchPrefix&(lock.AllFeatures|lock.FeatureSessions) != 0 {
		t.Error("FeatureWatchPrefix overlaps another feature or is in AllFeatures")
	}
}
