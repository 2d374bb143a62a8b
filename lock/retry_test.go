package lock_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

func TestExponentialBackoff(t *testing.T) {
	b := lock.ExponentialBackoff{Base: 10 * time.Millisecond, Max: 80 * time.Millisecond, MaxAttempts: 6}
	want := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, w := range want {
		d, ok := b.Backoff(i + 1)
		if !ok || d != w*time.Millisecond {
			t.Errorf("attempt %d: %v %v, want %v", i+1, d, ok, w*time.Millisecond)
		}
	}
	if _, ok := b.Backoff(7); ok {
		t.Error("retried past MaxAttempts")
	}
	if _, ok := b.Backoff(0); ok {
		t.Error("attempt 0 is not a retry")
	}
}

func TestExponentialBackoffJitter(t *testing.T) {
	b := lock.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 1}
	seen := map[time.Duration]bool{}
	for range 200 {
		d, _ := b.Backoff(3) // cap 400ms
		if d < 0 || d > 400*time.Millisecond {
			t.Fatalf("jittered pause %v outside [0, 400ms]", d)
		}
		seen[d] = true
	}
	if len(seen) < 50 {
		t.Errorf("only %d distinct pauses in 200 draws: no jitter", len(seen))
	}
	half := lock.ExponentialBackoff{Base: 100 * time.Millisecond, Max: time.Second, Jitter: 0.5}
	for range 200 {
		if d, _ := half.Backoff(1); d < 50*time.Millisecond || d > 100*time.Millisecond {
			t.Fatalf("half jitter pause %v outside [50ms, 100ms]", d)
		}
	}
}

func TestNoRetry(t *testing.T) {
	if _, ok := lock.NoRetry().Backoff(1); ok {
		t.Error("NoRetry retried")
	}
}

func TestRetry(t *testing.T) {
	fast := lock.ConstantBackoff{Interval: time.Millisecond, MaxAttempts: 5}
	t.Run("SucceedsAfterTransientErrors", func(t *testing.T) {
		calls := 0
		err := lock.Retry(context.Background(), fast, nil, func(context.Context) error {
			if calls++; calls < 3 {
				return fmt.Errorf("node down: %w", lock.ErrUnavailable)
			}
			return nil
		})
		if err != nil || calls != 3 {
			t.Errorf("Retry = %v after %d calls, want success after 3", err, calls)
		}
	})
	t.Run("FinalErrorNotRetried", func(t *testing.T) {
		calls := 0
		err := lock.Retry(context.Background(), fast, nil, func(context.Context) error {
			calls++
			return lock.ErrNotHeld
		})
		if !errors.Is(err, lock.ErrNotHeld) || calls != 1 {
			t.Errorf("Retry = %v after %d calls, want ErrNotHeld after 1", err, calls)
		}
	})
	t.Run("GivesUp", func(t *testing.T) {
		calls := 0
		err := lock.Retry(context.Background(), fast, nil, func(context.Context) error {
			calls++
			return lock.ErrUnavailable
		})
		if !errors.Is(err, lock.ErrUnavailable) || calls != 6 {
			t.Errorf("Retry = %v after %d calls, want ErrUnavailable after 1+5", err, calls)
		}
	})
	t.Run("ContextEnds", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		err := lock.Retry(ctx, lock.ConstantBackoff{Interval: time.Hour}, nil, func(context.Context) error {
			cancel()
			return lock.ErrUnavailable
		})
		if !errors.Is(err, lock.ErrUnavailable) || !errors.Is(err, context.Canceled) {
			t.Errorf("Retry = %v, want both the last error and context.Canceled", err)
		}
	})
}
