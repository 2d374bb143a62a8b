package backends

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// spy records the options the wrapper passes on.
type spy struct {
	*locktest.MemLocker
	multi []lock.AcquireOptions
}

func (s *spy) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	s.multi = append(s.multi, opts)
	return s.MemLocker.AcquireAll(ctx, keys, opts)
}

func (s *spy) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	s.multi = append(s.multi, opts)
	return s.MemLocker.TryAcquireAll(ctx, keys, opts)
}

// TestSessionLocksPassFeaturesThrough: the session wrapper reports the
// features of the Locker it wraps, its multi-key acquires and watches
// reach the wrapped Locker (multi-key ones on the session: AutoRenew), a
// shared acquire too; over a Locker without them, every one is refused
// with lock.ErrUnsupported.
func TestSessionLocksPassFeaturesThrough(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	inner := &spy{MemLocker: locktest.NewMemStore().NewLocker()}
	defer inner.Close()
	var l lock.Locker = sessionLocks{inner}
	if got := lock.FeaturesOf(l); got != lock.AllFeatures {
		t.Fatalf("Features = %v, want %v", got, lock.AllFeatures)
	}
	leases, err := lock.AcquireAll(ctx, l, []string{"a", "b"}, lock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("AcquireAll: %v", err)
	}
	if err := lock.ReleaseAll(ctx, l, leases); err != nil {
		t.Fatalf("ReleaseAll: %v", err)
	}
	leases, err = l.(lock.MultiLocker).TryAcquireAll(ctx, []string{"a", "b"}, lock.AcquireOptions{TTL: 5 * time.Second})
	if err != nil {
		t.Fatalf("TryAcquireAll: %v", err)
	}
	if len(inner.multi) != 2 || !inner.multi[0].AutoRenew || !inner.multi[1].AutoRenew {
		t.Errorf("the wrapped Locker got %+v, want two multi-key acquires with AutoRenew", inner.multi)
	}
	evs, err := lock.Watch(ctx, l, "a")
	if err != nil {
		t.Fatalf("Watch: %v", err)
	}
	if ev := <-evs; ev.Type != lock.EventHolder || ev.Token != leases[0].Token {
		t.Errorf("first event %+v, want the holder with token %v", ev, leases[0].Token)
	}
	lock.ReleaseAll(ctx, l, leases)
	r1, err := l.TryAcquire(ctx, "s", lock.AcquireOptions{TTL: 5 * time.Second, Mode: lock.ModeShared})
	if err != nil {
		t.Fatalf("shared TryAcquire: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "s", lock.AcquireOptions{TTL: 5 * time.Second, Mode: lock.ModeShared}); err != nil {
		t.Fatalf("second shared TryAcquire: %v", err)
	}
	_ = r1

	bare := locktest.NewMemStoreWithFeatures(0).NewLocker()
	defer bare.Close()
	l = sessionLocks{bare}
	if got := lock.FeaturesOf(l); got != 0 {
		t.Errorf("Features over a featureless Locker = %v, want none", got)
	}
	if _, err := lock.AcquireAll(ctx, l, []string{"a", "b"}, lock.AcquireOptions{}); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("AcquireAll: %v, want ErrUnsupported", err)
	}
	if _, err := l.(lock.MultiLocker).TryAcquireAll(ctx, []string{"a", "b"}, lock.AcquireOptions{}); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("TryAcquireAll: %v, want ErrUnsupported", err)
	}
	if _, err := lock.Watch(ctx, l, "a"); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Watch: %v, want ErrUnsupported", err)
	}
	if _, err := l.TryAcquire(ctx, "s2", lock.AcquireOptions{Mode: lock.ModeShared}); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("shared TryAcquire: %v, want ErrUnsupported", err)
	}
}
