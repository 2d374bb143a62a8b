package redlock

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestUnsupportedRefusedBeforeSending: every option needing one of the
// other primitives fails with lock.ErrUnsupported and its reason, before
// any command reaches a master (the masters stay empty), from Acquire and
// TryAcquire alike; lock.AcquireAll and lock.Watch refuse too. A plain
// acquire afterwards does write keys, so the emptiness check can fail.
func TestUnsupportedRefusedBeforeSending(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	l := newLocker(t, rs, nil)
	if f := lock.FeaturesOf(l); f != 0 {
		t.Fatalf("Features = %v, want none", f)
	}
	ctx := bg(t, 30*time.Second)
	cases := []struct {
		name   string
		opts   lock.AcquireOptions
		reason string
	}{
		{"shared", lock.AcquireOptions{TTL: time.Second, Mode: lock.ModeShared}, ReasonShared},
		{"semaphore", lock.AcquireOptions{TTL: time.Second, Permits: 3}, ReasonSemaphore},
		{"lockdelay", lock.AcquireOptions{TTL: time.Second, LockDelay: time.Second}, ReasonLockDelay},
	}
	for _, c := range cases {
		for _, try := range []bool{false, true} {
			var err error
			if try {
				_, err = l.TryAcquire(ctx, "k-"+c.name, c.opts)
			} else {
				_, err = l.Acquire(ctx, "k-"+c.name, c.opts)
			}
			var ue *lock.UnsupportedError
			if !errors.Is(err, lock.ErrUnsupported) || !errors.As(err, &ue) || ue.Reason != c.reason || ue.Backend != "redlock" {
				t.Errorf("%s (try %v): err = %v, want ErrUnsupported with redlock's reason", c.name, try, err)
			}
		}
	}
	if _, err := lock.AcquireAll(ctx, l, []string{"a", "b"}, lock.AcquireOptions{}); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("AcquireAll: err = %v, want ErrUnsupported", err)
	}
	if _, err := lock.Watch(ctx, l, "a"); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("Watch: err = %v, want ErrUnsupported", err)
	}
	keysOn := func() int {
		n := 0
		for _, r := range rs {
			c, cancel := context.WithTimeout(ctx, 2*time.Second)
			v, err := raw(t, r).DBSize(c).Result()
			cancel()
			if err != nil {
				t.Fatalf("DBSIZE: %v", err)
			}
			n += int(v)
		}
		return n
	}
	if n := keysOn(); n != 0 {
		t.Errorf("%d keys on the masters after refused acquires, want 0", n)
	}
	lease, err := l.TryAcquire(ctx, "plain", lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("plain TryAcquire: %v", err)
	}
	defer l.Release(ctx, lease)
	if n := keysOn(); n == 0 {
		t.Errorf("no keys on the masters after a grant: the emptiness check cannot fail")
	}
	for _, r := range []string{ReasonShared, ReasonSemaphore, ReasonMultiKey, ReasonWatch, ReasonLockDelay} {
		if strings.TrimSpace(r) == "" {
			t.Errorf("empty reason")
		}
	}
}
