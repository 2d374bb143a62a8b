package localgate

import (
	"context"
	"fmt"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Outcome is the result of one attempt at the server.
type Outcome struct {
	Lease *lock.Lease
	// Held names the holder that refused the attempt.
	Held *lock.HeldError
	// AwaitRelease says that the holder is known to hold the key, so the
	// caller sleeps for Await (the holder's remaining TTL and a margin)
	// unless its release is announced first, instead of backing off.
	AwaitRelease bool
	Await        time.Duration
	// Err is why the attempt could not tell (no server answer, validity
	// exceeded); the caller retries while lock.IsRetryable(Err).
	Err error
}

// result is what an attempt that did not grant returns to the caller.
func (o Outcome) result() error {
	if o.Err != nil {
		return o.Err
	}
	return o.Held
}

// Subscription is a waiter on a key's release announcements. Wake holds at
// most one pending wake-up.
type Subscription struct {
	Wake  <-chan struct{}
	Close func()
}

// drain drops a pending wake-up before a new attempt: the attempt sees the
// state that the wake-up announced.
func (s *Subscription) drain() {
	select {
	case <-s.Wake:
	default:
	}
}

// wait makes attempts until one succeeds (only one when try): after a
// refusal it sleeps until the key's release is announced, the holder's
// TTL runs out or the backoff of an inconclusive attempt has passed.
func (s *Sequence) wait(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	var sub *Subscription
	subscribe := func() {
		sub = s.b.Subscribe(ctx, key)
	}
	defer func() {
		if sub != nil {
			sub.Close()
		}
	}()
	if !try && s.b.SubscribeFirst {
		// A release committed after the attempt looked at the key then
		// finds us listening.
		subscribe()
	}
	var floor lock.Token
	retries := 0
	for {
		if sub != nil {
			sub.drain()
		}
		o := s.b.Attempt(key, opts, try, floor)
		if o.Lease == nil && sub == nil && !try {
			// The key is taken: subscribe, then try again at once, since a
			// release announced before the subscription took effect would
			// not wake us.
			subscribe()
			if s.b.GaveUp(ctx, key) == nil {
				continue
			}
		}
		if o.Lease != nil {
			if err := s.b.GaveUp(ctx, key); err != nil {
				// The grant raced the cancellation: never leave it behind.
				s.b.Discard(o.Lease)
				return nil, err
			}
			return o.Lease, nil
		}
		if o.Held != nil && o.Held.Token > floor {
			floor = o.Held.Token
		}
		if try {
			return nil, o.result()
		}
		if err := s.b.GaveUp(ctx, key); err != nil {
			if o.Err != nil {
				return nil, fmt.Errorf("%w (last attempt: %w)", err, o.Err)
			}
			return nil, err
		}
		var pause time.Duration
		if o.Err == nil && o.AwaitRelease {
			retries = 0
			pause = o.Await
		} else {
			if o.Err != nil && !lock.IsRetryable(o.Err) {
				return nil, o.Err
			}
			retries++
			p, again := s.b.Retry.Backoff(retries)
			if !again {
				return nil, o.result()
			}
			pause = p
		}
		t := time.NewTimer(pause)
		select {
		case <-sub.Wake:
		case <-t.C:
		case <-ctx.Done():
		case <-s.b.Ctx.Done():
		}
		t.Stop()
		if err := s.b.GaveUp(ctx, key); err != nil {
			return nil, err
		}
	}
}
