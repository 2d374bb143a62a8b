package lock

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// RetryStrategy decides whether and how long to wait before each retry of a
// failed attempt (exponential backoff with full jitter, as in AWS's
// "Exponential Backoff And Jitter").
// Implementations are stateless and safe for concurrent use.
type RetryStrategy interface {
	// Backoff returns the pause before retry number attempt (1 for the
	// first retry) and false when no more retries should be made.
	Backoff(attempt int) (time.Duration, bool)
}

// Defaults of ExponentialBackoff.
const (
	DefaultBackoffBase = 10 * time.Millisecond
	DefaultBackoffMax  = time.Second
)

// ExponentialBackoff waits Base·2^(attempt−1), capped at Max, then applies
// "full jitter" (a uniform pick in [0, pause]) scaled by Jitter so that
// clients that failed together do not retry together. MaxAttempts > 0 limits
// the number of retries.
type ExponentialBackoff struct {
	Base        time.Duration
	Max         time.Duration
	Jitter      float64 // 0: none, 1: full jitter (the pause is uniform in [0, cap])
	MaxAttempts int     // 0: unlimited
}

// DefaultBackoff is ExponentialBackoff from 10 ms to 1 s with full jitter
// and no attempt limit: bound it with a context.
func DefaultBackoff() ExponentialBackoff {
	return ExponentialBackoff{Base: DefaultBackoffBase, Max: DefaultBackoffMax, Jitter: 1}
}

// Backoff implements RetryStrategy.
func (b ExponentialBackoff) Backoff(attempt int) (time.Duration, bool) {
	if attempt < 1 || (b.MaxAttempts > 0 && attempt > b.MaxAttempts) {
		return 0, false
	}
	pause := b.Base
	for i := 1; i < attempt && pause < b.Max; i++ {
		pause *= 2
	}
	if b.Max > 0 && pause > b.Max {
		pause = b.Max
	}
	if j := min(max(b.Jitter, 0), 1); j > 0 && pause > 0 {
		keep := time.Duration(float64(pause) * (1 - j))
		pause = keep + rand.N(pause-keep+1)
	}
	return pause, true
}

// ConstantBackoff waits Interval between attempts, at most MaxAttempts
// retries (0: unlimited).
type ConstantBackoff struct {
	Interval    time.Duration
	MaxAttempts int
}

// Backoff implements RetryStrategy.
func (c ConstantBackoff) Backoff(attempt int) (time.Duration, bool) {
	if attempt < 1 || (c.MaxAttempts > 0 && attempt > c.MaxAttempts) {
		return 0, false
	}
	return c.Interval, true
}

// NoRetry never retries.
func NoRetry() RetryStrategy { return noRetry{} }

type noRetry struct{}

func (noRetry) Backoff(int) (time.Duration, bool) { return 0, false }

// IsRetryable reports whether an operation that failed with err may succeed
// if tried again: the backend was unavailable or not the leader. A refusal
// (ErrNotHeld, ErrNotAcquired, invalid input) is final.
func IsRetryable(err error) bool {
	return errors.Is(err, ErrUnavailable)
}

// Retry runs op until it succeeds, fails with an error that retryable
// rejects (nil retryable means IsRetryable), the strategy gives up, or ctx
// ends. The error of the last attempt is returned; when ctx ended first,
// ctx.Err() is joined to it so that both can be matched with errors.Is.
func Retry(ctx context.Context, s RetryStrategy, retryable func(error) bool, op func(context.Context) error) error {
	if retryable == nil {
		retryable = IsRetryable
	}
	for attempt := 1; ; attempt++ {
		err := op(ctx)
		if err == nil || !retryable(err) {
			return err
		}
		pause, again := s.Backoff(attempt)
		if !again {
			return err
		}
		t := time.NewTimer(pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return fmt.Errorf("%w (after %d attempts: %w)", err, attempt, ctx.Err())
		case <-t.C:
		}
	}
}
