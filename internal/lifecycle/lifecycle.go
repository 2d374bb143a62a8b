// Package lifecycle is the open-to-closed life of a client-side backend's
// Locker (redlock, sqllock, zklike, and the peer libraries' wrappers): the calls in progress, the background
// work they start, a context that ends at Close, and a Close that waits
// for both. It also opens each call of the lock.Locker contract the same
// way in every backend: ErrClosed once closed, then the contract's checks
// of the arguments, then the call, counted until it returns.
package lifecycle

import (
	"context"
	"sync"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// State is one Locker's life. Its methods are safe for concurrent use. The
// zero value is not usable; call New.
type State struct {
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	closed  bool           // Close has begun: no new calls
	drained bool           // Close has waited for the calls: no new background work
	calls   sync.WaitGroup // calls in progress (Begin … End)
	bg      sync.WaitGroup // background work (Go)
}

// New returns the state of an open Locker.
func New() *State {
	ctx, cancel := context.WithCancel(context.Background())
	return &State{ctx: ctx, cancel: cancel}
}

// Context ends when Close begins: it stops waits, keep-alives and
// background work.
func (s *State) Context() context.Context { return s.ctx }

// Begin registers a call; false (register nothing) once Close has begun.
// Every true must be matched by one End.
func (s *State) Begin() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.calls.Add(1)
	return true
}

// End ends a call registered by Begin.
func (s *State) End() { s.calls.Done() }

// Closed reports whether Close has begun.
func (s *State) Closed() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closed
}

// Go runs f on a goroutine of its own as background work, which Close
// waits for after the calls. Work started before Close, or by a call in
// progress (between Begin and End, even while Close waits for it), always
// runs; Go returns false without running f only once Close has finished
// waiting for the calls.
func (s *State) Go(f func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.drained {
		return false
	}
	s.bg.Add(1)
	go func() {
		defer s.bg.Done()
		f()
	}()
	return true
}

// Close refuses new calls, ends Context, and waits for the calls in
// progress and then for the background work. It reports whether it did
// so: a later Close returns false at once.
func (s *State) Close() bool { return s.CloseAfterCalls(nil) }

// CloseAfterCalls is Close that calls stop (if not nil) once the calls in
// progress have ended and before it waits for the background work: for a
// Locker whose background work ends only when its client stops (a library
// call that takes no context and returns when its connection closes).
func (s *State) CloseAfterCalls(stop func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	s.mu.Unlock()
	s.cancel()
	s.calls.Wait()
	s.mu.Lock()
	s.drained = true
	s.mu.Unlock()
	if stop != nil {
		stop()
	}
	s.bg.Wait()
	return true
}

// Acquire opens an Acquire or TryAcquire call on key: lock.ErrClosed once
// closed, else the options normalized (owner defaulting to clientID) and
// passed to f, counted as a call until f returns.
func (s *State) Acquire(key string, opts lock.AcquireOptions, clientID string, f func(lock.AcquireOptions) (*lock.Lease, error)) (*lock.Lease, error) {
	if !s.Begin() {
		return nil, lock.ErrClosed
	}
	defer s.End()
	opts, err := kit.Normalize(opts, key, clientID)
	if err != nil {
		return nil, err
	}
	return f(opts)
}

// Release opens a Release call: lock.ErrClosed once closed, else the
// lease checked and f called, counted as a call until it returns.
func (s *State) Release(lease *lock.Lease, f func() error) error {
	if !s.Begin() {
		return lock.ErrClosed
	}
	defer s.End()
	if err := kit.ValidateLease(lease); err != nil {
		return err
	}
	return f()
}

// Renew opens a Renew call: lock.ErrClosed once closed, else the lease and
// ttl checked and f called with the TTL to ask for, counted as a call
// until it returns.
func (s *State) Renew(lease *lock.Lease, ttl time.Duration, f func(ttl time.Duration) error) error {
	if !s.Begin() {
		return lock.ErrClosed
	}
	defer s.End()
	ttl, err := kit.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	return f(ttl)
}

// Inspect opens an Inspect call on key: lock.ErrClosed once closed, else
// the key checked and f called, counted as a call until it returns.
func (s *State) Inspect(key string, f func() (*lock.LockInfo, error)) (*lock.LockInfo, error) {
	if !s.Begin() {
		return nil, lock.ErrClosed
	}
	defer s.End()
	if err := kit.ValidateKey(key); err != nil {
		return nil, err
	}
	return f()
}
