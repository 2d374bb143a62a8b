package localgate

import (
	"context"

	"github.com/lockgate/lockgate/lock"
)

// MaxHandoffs bounds how many times in a row a Sequence hands a key from
// one caller to the next local waiter without freeing it at the server.
// Each handoff skips a release and an acquire, but also skips every waiter
// of another Locker, which only learns of a key through a real release:
// after this many handoffs the key is really released, so those waiters
// get their chance: another Locker's waiter waits behind at most
// MaxHandoffs+1 consecutive holds of this Locker's callers.
const MaxHandoffs = 8

// Backend is what a Locker supplies to its Sequence: the operations that
// talk to its servers. The Sequence owns everything local around them.
type Backend struct {
	// Locker renews leases acquired with AutoRenew, until Ctx ends.
	Locker lock.Locker
	// Ctx ends when the Locker closes.
	Ctx context.Context
	// Attempt makes one attempt at the server. Its grant must carry a
	// token above floor, the largest token a refusal named so far. try
	// says the caller will not wait (a backend may then read the holder
	// without marking itself as waiting).
	Attempt func(key string, opts lock.AcquireOptions, try bool, floor lock.Token) Outcome
	// Subscribe starts listening for key's release announcements.
	Subscribe func(ctx context.Context, key string) *Subscription
	// SubscribeFirst subscribes before the first attempt rather than
	// after the first refusal (when subscribing costs nothing remote).
	SubscribeFirst bool
	// Retry paces attempts that could not tell who holds the key.
	Retry lock.RetryStrategy
	// Handoff replaces lease by a new grant for t in one server operation,
	// then calls HandOver (it succeeded) or Decline (it did not) on the
	// gate, and ends or releases lease accordingly.
	Handoff func(ctx context.Context, lease *lock.Lease, t *Turn) error
	// Release frees lease at the server and ends the gate's holder
	// (EndHolder).
	Release func(ctx context.Context, lease *lock.Lease) error
	// GaveUp is the error to return instead of a grant when ctx or the
	// Locker ended meanwhile, nil while both live.
	GaveUp func(ctx context.Context, key string) error
	// Discard frees a grant nobody will use (one that raced its caller's
	// cancellation) and ends it.
	Discard func(lease *lock.Lease)
}

// Sequence is a Gate bound to its backend: it runs the whole local
// acquire and release sequence, so that a backend supplies only its server
// operations.
type Sequence struct {
	*Gate
	b Backend
}

// NewSequence returns the Sequence of one Locker, handing a key over at
// most MaxHandoffs times in a row.
func NewSequence(b Backend) *Sequence {
	return &Sequence{Gate: New(MaxHandoffs), b: b}
}

// Acquire acquires key: after the gate (entered unless try, or unless the
// caller chose the Handle: a possible re-send of a grant that holds the
// gate must not queue behind it), it takes a handed-over lease or makes
// the backend's Attempt, and then holds the gate or exits it. A grant that
// raced the caller's cancellation is discarded, never left behind.
func (s *Sequence) Acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	if err := s.b.GaveUp(ctx, key); err != nil {
		return nil, err
	}
	lease, err := s.acquire(ctx, key, opts, try)
	if err != nil {
		return nil, err
	}
	if opts.AutoRenew {
		go lock.KeepAlive(s.b.Ctx, s.b.Locker, lease)
	}
	return lease, nil
}

func (s *Sequence) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	if try || opts.Handle != "" {
		return s.wait(ctx, key, opts, try)
	}
	gaveUp := func() error { return s.b.GaveUp(ctx, key) }
	handed, err := s.Enter(ctx, s.b.Ctx.Done(), key, opts, gaveUp, s.b.Discard)
	if err != nil {
		return nil, err
	}
	if handed != nil {
		if err := gaveUp(); err != nil {
			s.b.Discard(handed)
			return nil, err
		}
		return handed, nil
	}
	lease, err := s.wait(ctx, key, opts, false)
	if err != nil {
		s.Exit(key)
		return nil, err
	}
	s.Hold(lease, false)
	return lease, nil
}

// Release releases lease: handed to the next local waiter when one waits
// and the handoff limit allows, otherwise freed at the server.
func (s *Sequence) Release(ctx context.Context, lease *lock.Lease) error {
	if t := s.TakeHandoff(lease); t != nil {
		return s.b.Handoff(ctx, lease, t)
	}
	return s.b.Release(ctx, lease)
}
