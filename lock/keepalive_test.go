package lock_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
	"github.com/lockgate/lockgate/lock/locktest"
)

func TestKeepAliveRenewsUntilReleased(t *testing.T) {
	l := locktest.NewMemStore().NewLocker()
	defer l.Close()
	lease, err := l.Acquire(context.Background(), "k", lock.AcquireOptions{TTL: 60 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { lock.KeepAlive(context.Background(), l, lease); close(done) }()
	select {
	case <-lease.Done():
		t.Fatalf("kept-alive lease ended: %v", lease.Err())
	case <-time.After(300 * time.Millisecond): // five TTLs
	}
	if err := l.Release(context.Background(), lease); err != nil {
		t.Fatal(err)
	}
	<-done // KeepAlive returns once the lease is released
}

// scripted is a Locker whose Renew answers from a script; only Renew is
// used by KeepAlive.
type scripted struct {
	lock.Locker
	mu      sync.Mutex
	answers []error // one per call; the last one repeats
	calls   atomic.Int32
}

func (s *scripted) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	s.mu.Lock()
	err := s.answers[0]
	if len(s.answers) > 1 {
		s.answers = s.answers[1:]
	}
	s.mu.Unlock()
	s.calls.Add(1)
	if err == nil {
		kit.Extend(lease, time.Now(), lease.TTL())
	}
	return err
}

func TestKeepAliveEndsLeaseWhenRenewalRefused(t *testing.T) {
	s := &scripted{answers: []error{nil, lock.ErrNotHeld}}
	lease := kit.NewLease(kit.Grant{Key: "k", TTL: time.Second, Sent: time.Now()})
	go lock.KeepAlive(context.Background(), s, lease)
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed after a refused renewal")
	}
	if !errors.Is(lease.Err(), lock.ErrNotHeld) {
		t.Errorf("Err = %v, want ErrNotHeld", lease.Err())
	}
	// Refused on the second renewal at ~2/3 TTL: well before the deadline.
	if time.Now().After(lease.Deadline()) {
		t.Error("lease ended by its deadline, not by the refusal")
	}
}

func TestKeepAliveRetriesTransientErrors(t *testing.T) {
	unavailable := errors.New("connection refused")
	s := &scripted{answers: []error{unavailable, unavailable, unavailable, nil}}
	lease := kit.NewLease(kit.Grant{Key: "k", TTL: 300 * time.Millisecond, Sent: time.Now()})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go lock.KeepAlive(ctx, s, lease)
	select {
	case <-lease.Done():
		t.Fatalf("lease ended although a retry succeeded in time: %v", lease.Err())
	case <-time.After(600 * time.Millisecond):
	}
	if n := s.calls.Load(); n < 5 {
		t.Errorf("%d renewals, want the 3 failures retried and renewals continuing", n)
	}
}

func TestKeepAliveLeaseExpiresWhenBackendUnreachable(t *testing.T) {
	s := &scripted{answers: []error{lock.ErrUnavailable}}
	lease := kit.NewLease(kit.Grant{Key: "k", TTL: 150 * time.Millisecond, Sent: time.Now()})
	go lock.KeepAlive(context.Background(), s, lease)
	select {
	case <-lease.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("Done not closed although no renewal ever succeeded")
	}
	if !errors.Is(lease.Err(), lock.ErrExpired) {
		t.Errorf("Err = %v, want ErrExpired", lease.Err())
	}
	if time.Now().Before(lease.Deadline()) {
		t.Error("Done closed before the deadline")
	}
}
