package lock

import (
	"context"
	"errors"
	"time"
)

// KeepAlive renews lease through l every TTL/3 until the lease ends, ctx
// ends, or l is closed. It is the auto-renewal of AcquireOptions.AutoRenew
// (auto-extension, as Redisson's lock watchdog does) and blocks; run it in
// its own goroutine.
//
// A refused renewal (ErrNotHeld) ends the lease at once: Done closes with
// that error. A transient failure (the backend is unreachable) is retried
// with jittered backoff for as long as the lease's deadline allows; if no
// renewal succeeds by then, the deadline closes Done with ErrExpired. Either
// way the holder learns of the loss through Done, never only through a log.
func KeepAlive(ctx context.Context, l Locker, lease *Lease) {
	backoff := ExponentialBackoff{Base: DefaultBackoffBase, Max: lease.TTL() / 10, Jitter: 1}
	for {
		if !sleep(ctx, lease, lease.TTL()/3) {
			return
		}
		for attempt := 1; ; attempt++ {
			// No attempt may outlive the lease: past the deadline a
			// renewal could not make the holder safe again.
			rctx, cancel := context.WithDeadline(ctx, lease.Deadline())
			err := l.Renew(rctx, lease, 0)
			cancel()
			if err == nil {
				break
			}
			switch {
			case errors.Is(err, ErrNotHeld), errors.Is(err, ErrNilLease):
				lease.End(err)
				return
			case errors.Is(err, ErrClosed), ctx.Err() != nil:
				return
			}
			pause, _ := backoff.Backoff(attempt)
			if !sleep(ctx, lease, pause) {
				return
			}
		}
	}
}

// sleep waits d; false when ctx or the lease ended first.
func sleep(ctx context.Context, lease *Lease, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-lease.Done():
		return false
	case <-t.C:
		return true
	}
}
