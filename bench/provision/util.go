package provision

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"time"

	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// Caps is what a backend guarantees (fencing tokens, TTLs, FIFO order,
// naming the holder); reports mark what one lacks.
type Caps = backends.Caps

// WorkDir is dir, or, when dir is empty, a new temporary directory named
// after prefix that cleanup removes.
func WorkDir(dir, prefix string) (_ string, cleanup func(), err error) {
	if dir != "" {
		return dir, func() {}, nil
	}
	d, err := os.MkdirTemp("", prefix)
	if err != nil {
		return "", nil, err
	}
	return d, func() { os.RemoveAll(d) }, nil
}

// SleepCtx sleeps for d or until ctx ends; it reports whether it slept.
func SleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// Pick returns a random element of xs.
func Pick[T any](rng *rand.Rand, xs []T) T { return xs[rng.IntN(len(xs))] }

// Between returns a random duration in [lo, hi).
func Between(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// ErrorKind names the class of a lock error for reports.
func ErrorKind(err error) string {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return "timeout"
	case errors.Is(err, lock.ErrNotLeader):
		return "not_leader"
	case errors.Is(err, lock.ErrUnavailable):
		return "unavailable"
	case errors.Is(err, lock.ErrNotHeld):
		return "not_held"
	case errors.Is(err, lock.ErrNotAcquired):
		return "not_acquired"
	case errors.Is(err, lock.ErrClosed):
		return "closed"
	}
	return "other"
}

// errorKind names an error's class for the report: ErrorKind's, and
// unsupported (the gate, or a backend without the primitive).
func ErrorKindOrUnsupported(err error) string {
	if errors.Is(err, lock.ErrUnsupported) {
		return "unsupported"
	}
	return ErrorKind(err)
}
