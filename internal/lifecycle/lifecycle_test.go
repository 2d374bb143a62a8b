package lifecycle

import (
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// TestClose: Close ends the context at once, refuses new calls, waits for
// the calls in progress and then for the background work they started
// (even while Close waited), and refuses background work after that.
func TestClose(t *testing.T) {
	s := New()
	if !s.Begin() {
		t.Fatal("Begin on an open State: false")
	}
	bgRelease := make(chan struct{})
	bgDone := make(chan struct{})
	if !s.Go(func() { <-bgRelease; close(bgDone) }) {
		t.Fatal("Go on an open State: false")
	}

	closed := make(chan bool)
	go func() { closed <- s.Close() }()
	<-s.Context().Done() // Close has begun
	if s.Begin() {
		t.Fatal("Begin after Close began: true")
	}
	if !s.Closed() {
		t.Fatal("Closed after Close began: false")
	}

	// The call in progress may still start background work.
	lateRan := make(chan struct{})
	if !s.Go(func() { close(lateRan) }) {
		t.Fatal("Go from a call in progress during Close: false")
	}
	<-lateRan
	select {
	case <-closed:
		t.Fatal("Close returned while a call was in progress")
	default:
	}
	s.End()

	// Close now waits for the background work.
	select {
	case <-closed:
		t.Fatal("Close returned while background work ran")
	default:
		// Close may not have reached its wait yet; it cannot pass it.
	}
	close(bgRelease)
	if !<-closed {
		t.Fatal("first Close: false")
	}
	select {
	case <-bgDone:
	default:
		t.Fatal("Close returned before the background work ended")
	}
	if s.Go(func() { t.Error("background work ran after Close") }) {
		t.Fatal("Go after Close: true")
	}
	if s.Close() {
		t.Fatal("second Close: true")
	}
}

// TestOpenings: each opening returns ErrClosed once closed (before it
// checks its arguments), the contract's validation error while open, and
// otherwise f's result, with f counted as a call.
func TestOpenings(t *testing.T) {
	s := New()
	lease := kit.NewLease(kit.Grant{Key: "k", Owner: "o", Token: 1, Handle: lock.NewHandle(), TTL: time.Minute, Sent: time.Now()})

	var got lock.AcquireOptions
	if _, err := s.Acquire("k", lock.AcquireOptions{}, "me", func(o lock.AcquireOptions) (*lock.Lease, error) {
		got = o
		return nil, nil
	}); err != nil {
		t.Fatal(err)
	}
	if got.Owner != "me" || got.TTL == 0 {
		t.Fatalf("Acquire passed %+v, want normalized options owned by me", got)
	}
	if _, err := s.Acquire("", lock.AcquireOptions{}, "me", nil); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("Acquire with an empty key: %v, want ErrInvalidKey", err)
	}
	if err := s.Release(nil, nil); !errors.Is(err, lock.ErrNilLease) {
		t.Fatalf("Release of a nil lease: %v, want ErrNilLease", err)
	}
	if err := s.Release(lease, func() error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Renew(lease, -time.Second, nil); !errors.Is(err, lock.ErrInvalidTTL) {
		t.Fatalf("Renew with a negative TTL: %v, want ErrInvalidTTL", err)
	}
	var ttl time.Duration
	if err := s.Renew(lease, 0, func(d time.Duration) error { ttl = d; return nil }); err != nil || ttl <= 0 {
		t.Fatalf("Renew with zero TTL: err %v, ttl %v; want the lease's TTL", err, ttl)
	}
	if _, err := s.Inspect("", nil); !errors.Is(err, lock.ErrInvalidKey) {
		t.Fatalf("Inspect with an empty key: %v, want ErrInvalidKey", err)
	}
	if _, err := s.Inspect("k", func() (*lock.LockInfo, error) { return nil, lock.ErrNotFound }); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("Inspect: %v, want f's ErrNotFound", err)
	}

	// A call in progress holds Close.
	closed := make(chan struct{})
	inside := make(chan struct{})
	leave := make(chan struct{})
	go s.Inspect("k", func() (*lock.LockInfo, error) { close(inside); <-leave; return nil, nil })
	<-inside
	go func() { s.Close(); close(closed) }()
	<-s.Context().Done()
	select {
	case <-closed:
		t.Fatal("Close returned during an Inspect")
	default:
	}
	close(leave)
	<-closed

	// Closed: ErrClosed first, even for invalid arguments; f never runs.
	never := func() { t.Error("f ran on a closed State") }
	if _, err := s.Acquire("", lock.AcquireOptions{}, "me", func(lock.AcquireOptions) (*lock.Lease, error) { never(); return nil, nil }); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v", err)
	}
	if err := s.Release(nil, func() error { never(); return nil }); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Release after Close: %v", err)
	}
	if err := s.Renew(nil, -1, func(time.Duration) error { never(); return nil }); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Renew after Close: %v", err)
	}
	if _, err := s.Inspect("", func() (*lock.LockInfo, error) { never(); return nil, nil }); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Inspect after Close: %v", err)
	}
}

// TestCloseAfterCalls: stop runs once the calls in progress have ended
// and before Close waits for the background work, so that background work
// which only stop ends lets Close return.
func TestCloseAfterCalls(t *testing.T) {
	s := New()
	if !s.Begin() {
		t.Fatal("Begin on an open State: false")
	}
	var inCall atomic.Bool
	inCall.Store(true)
	stopped := make(chan struct{})
	bgDone := make(chan struct{})
	if !s.Go(func() { <-stopped; close(bgDone) }) {
		t.Fatal("Go on an open State: false")
	}
	closed := make(chan bool)
	go func() {
		closed <- s.CloseAfterCalls(func() {
			if inCall.Load() {
				t.Error("stop ran while a call was in progress")
			}
			close(stopped)
		})
	}()
	<-s.Context().Done()
	inCall.Store(false)
	s.End()
	if !<-closed {
		t.Fatal("first CloseAfterCalls: false")
	}
	select {
	case <-bgDone:
	default:
		t.Fatal("CloseAfterCalls returned before the background work ended")
	}
	if s.CloseAfterCalls(func() { t.Error("stop ran on a second Close") }) {
		t.Fatal("second CloseAfterCalls: true")
	}
}
