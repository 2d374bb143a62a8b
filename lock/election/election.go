// Package election is leader election over any lock.Locker: a leader is the
// exclusive holder of the election's key, and its fencing token names its
// term.
//
//   - Campaign waits until the caller is the leader: an exclusive,
//     auto-renewed acquire of the key, with the candidate's value stored
//     beside it. It returns a Leadership whose Done closes when leadership
//     is lost (its lease expired, a renewal was refused, it resigned, or its
//     Locker was closed).
//   - Resign releases the key; the next campaigner in line (FIFO on backends
//     that queue) becomes the leader at once.
//   - Observe streams the leader: the current one (or none) once the watch
//     is in sync, then every change in order. It needs lock.FeatureWatch.
//   - Current asks once (Inspect).
//
// # How it maps to the usual APIs
//
// etcd's concurrency.Election (Campaign, Resign, Leader, Observe) is this
// API almost name for name; etcd's leader key revision is our fencing token.
// Curator's LeaderLatch is Campaign (await) plus Leadership.Done
// (hasLeadership turning false); its LeaderSelector's "relinquish when
// takeLeadership returns" is Resign. client-go's leaderelection runs
// OnStartedLeading when Campaign returns and OnStoppedLeading when Done
// closes; its lease duration and renew deadline are WithTTL (renewal at
// TTL/3 is lock.KeepAlive's).
//
// # Fencing
//
// A leader that is paused (GC, VM migration, a slow disk) can wake after its
// lease expired and another leader was elected, and still believe it leads:
// no election can prevent that. Every write a leader makes must therefore
// carry Leadership.Token, and the resource must reject a token lower than
// the highest it has seen (see the fenced store). A new leader's token is
// always higher than every earlier leader's.
package election

import (
	"context"
	"errors"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Option configures Campaign.
type Option func(*config)

type config struct {
	ttl   time.Duration
	owner string
}

// WithTTL sets the leader's lease TTL: how long after a leader crashes (or
// is cut off) a new one can be elected. Default lock.DefaultTTL. The lease
// is renewed at TTL/3 while the leader lives.
func WithTTL(ttl time.Duration) Option { return func(c *config) { c.ttl = ttl } }

// WithOwner sets the owner id recorded with the leadership (default: the
// Locker's client id).
func WithOwner(owner string) Option { return func(c *config) { c.owner = owner } }

// Leadership is a won election: the leader's lease on the key.
type Leadership struct {
	Key string
	// Lease is the leader's exclusive, auto-renewed lease.
	Lease *lock.Lease

	l lock.Locker
}

// Token is the leadership's fencing token: send it with every write.
func (e *Leadership) Token() lock.Token { return e.Lease.Token }

// Done closes when leadership is lost (or resigned); Err says why.
func (e *Leadership) Done() <-chan struct{} { return e.Lease.Done() }

// Err is nil while the leadership lasts, then why it ended.
func (e *Leadership) Err() error { return e.Lease.Err() }

// Resign gives the leadership up: the key is released and the next
// campaigner becomes the leader. Resigning a leadership that was already
// lost returns an error matching lock.ErrNotHeld.
func (e *Leadership) Resign(ctx context.Context) error { return e.l.Release(ctx, e.Lease) }

// Campaign waits until the caller leads the election of key, or ctx ends
// (then it returns ctx's error and holds nothing). value is published with
// the leadership (Observe and Current report it): typically the leader's
// address.
func Campaign(ctx context.Context, l lock.Locker, key string, value []byte, opts ...Option) (*Leadership, error) {
	c := config{ttl: lock.DefaultTTL}
	for _, o := range opts {
		o(&c)
	}
	lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: c.ttl, AutoRenew: true, Value: value, Owner: c.owner})
	if err != nil {
		return nil, err
	}
	return &Leadership{Key: key, Lease: lease, l: l}, nil
}

// Resign is e.Resign(ctx).
func Resign(ctx context.Context, e *Leadership) error { return e.Resign(ctx) }

// Leader is who leads an election, as Observe and Current report it.
type Leader struct {
	Key string
	// Present is false when nobody leads (the fields below are then zero).
	Present bool
	Owner   string
	Value   []byte
	// Token is the leader's fencing token: it names the term.
	Token lock.Token
	// Revision is the backend's revision of the change (0 from Current, or
	// where the backend has none).
	Revision uint64
}

// Current reports the election's leader now (Present false when none).
func Current(ctx context.Context, l lock.Locker, key string) (Leader, error) {
	info, err := l.Inspect(ctx, key)
	switch {
	case errors.Is(err, lock.ErrNotFound):
		return Leader{Key: key}, nil
	case err != nil:
		return Leader{}, err
	}
	return Leader{Key: key, Present: true, Owner: info.Owner, Value: info.Value, Token: info.Token}, nil
}

// Backoff bounds of Observe's re-watch.
const (
	rewatchMin = 50 * time.Millisecond
	rewatchMax = 2 * time.Second
)

// Observe streams the election's leader: first the current leader (or one
// with Present false) once the watch is in sync, then each change in the
// order the backend made it: a new leader (a grant), or none (the leader
// resigned or its lease expired). A leader that hands over directly to the
// next campaigner gives "none" then the new leader.
//
// When the watch breaks (an EventError: connection lost, leader change of
// the backend, lock.ErrWatchOverflow), Observe watches again, with backoff
// from 50 ms to 2 s, and goes on from the holders the new watch reports:
// a leader already sent is not sent again (events are de-duplicated by
// token), and a leader that came and went while the watch was down is not
// seen at all — Observe reports the leader, not every term. The channel
// closes when ctx ends or the Locker is closed. On a Locker without
// lock.FeatureWatch it fails at once with an error matching
// lock.ErrUnsupported.
func Observe(ctx context.Context, l lock.Locker, key string) (<-chan Leader, error) {
	events, err := lock.Watch(ctx, l, key)
	if err != nil {
		return nil, err
	}
	out := make(chan Leader, 16)
	go observe(ctx, l, key, events, out)
	return out, nil
}

func observe(ctx context.Context, l lock.Locker, key string, events <-chan lock.Event, out chan<- Leader) {
	defer close(out)
	var (
		cur     Leader     // the leader last sent
		sent    bool       // anything sent yet
		top     lock.Token // the highest leader token sent
		synced  bool       // the current watch is past EventSynced
		holder  *lock.Event
		backoff = rewatchMin
	)
	emit := func(ld Leader) bool {
		switch {
		case sent && !ld.Present && !cur.Present:
			return true // still nobody (a re-watch's sync)
		case ld.Present && ld.Token <= top && sent:
			return true // sent already, or older than what was (a re-watch's sync)
		}
		select {
		case out <- ld:
			cur, sent = ld, true
			top = max(top, ld.Token)
			return true
		case <-ctx.Done():
			return false
		}
	}
	leader := func(ev *lock.Event) Leader {
		return Leader{Key: key, Present: true, Owner: ev.Owner, Value: ev.Value, Token: ev.Token, Revision: ev.Revision}
	}
	for {
		ev, ok := <-events
		if !ok || ev.Type == lock.EventError {
			if ctx.Err() != nil {
				return
			}
			if !ok {
				// Closed without an error: the Locker was closed (or the
				// context ended, handled above).
				return
			}
			for {
				select {
				case <-ctx.Done():
					return
				case <-time.After(backoff):
				}
				backoff = min(2*backoff, rewatchMax)
				var err error
				events, err = lock.Watch(ctx, l, key)
				if err == nil {
					break
				}
				if errors.Is(err, lock.ErrClosed) || errors.Is(err, lock.ErrUnsupported) || ctx.Err() != nil {
					return
				}
			}
			synced, holder = false, nil
			continue
		}
		switch ev.Type {
		case lock.EventHolder:
			if holder == nil {
				holder = &ev // the oldest holder leads
			}
		case lock.EventSynced:
			synced, backoff = true, rewatchMin
			ld := Leader{Key: key, Revision: ev.Revision}
			if holder != nil {
				ld = leader(holder)
			}
			if !emit(ld) {
				return
			}
		case lock.EventGranted:
			if synced && !emit(leader(&ev)) {
				return
			}
		case lock.EventReleased, lock.EventExpired:
			if synced && cur.Present && ev.Token == cur.Token && !emit(Leader{Key: key, Revision: ev.Revision}) {
				return
			}
		}
	}
}
