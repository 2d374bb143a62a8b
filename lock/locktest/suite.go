// Package locktest is the conformance suite of the lock contract. Every
// backend, and the Go client over the gateway, runs it:
//
//	func TestConformance(t *testing.T) {
//		srv := startServers(t)
//		locktest.Run(t, locktest.Factory{
//			New:  func(t *testing.T) lock.Locker { return newClient(t, srv) },
//			Caps: locktest.Capabilities{FIFO: true, InspectValue: true},
//		})
//	}
//
// Beyond the exclusive lock, the other primitives' cases run when
// lock.FeaturesOf reports the feature they need: SharedExclusion and
// WriterNotStarved (FeatureShared), Semaphore (FeatureSemaphore), MultiKey
// (FeatureMultiKey), Watch and Election (FeatureWatch, the latter through
// lock/election), LockDelay (FeatureLockDelay). Unsupported runs on every
// backend: whatever a backend does not report, it must refuse with
// lock.ErrUnsupported, holding nothing.
//
// The package also holds the history checker (CheckHistory), the in-memory
// reference locker (MemStore) that passes the suite, and, in its tests,
// deliberately broken lockers that prove the suite catches what it claims to.
package locktest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Factory supplies the backend under test.
type Factory struct {
	// New returns a new client of the backend under test. Every Locker that
	// New returns during one Run talks to the same backend: a key held
	// through one is held for all. The suite closes each Locker at the end
	// of the (sub)test that made it. Keys are unique per case, so one
	// backend serves the whole run.
	New func(t *testing.T) lock.Locker

	// Caps declares what the backend promises beyond the contract, and the
	// timing bounds the suite holds it to.
	Caps Capabilities
}

// Capabilities declares a backend's optional guarantees and its timing
// bounds. Zero fields take the defaults below.
type Capabilities struct {
	// FIFO: waiters on a key are granted in the order they began waiting.
	// Requires InspectWaiters, which the suite uses to know that a waiter
	// is queued before it starts the next one.
	FIFO bool
	// InspectOwner: Inspect reports the holder's owner id.
	InspectOwner bool
	// InspectValue: Inspect returns the value given at acquire.
	InspectValue bool
	// InspectWaiters: Inspect reports the number of queued waiters.
	InspectWaiters bool
	// Wanted: a holder's Lease.Wanted closes when a caller waits for its
	// key (lock.SignalsWanted), within GrantBound.
	Wanted bool

	// TTL is the short lease TTL of the expiry cases; it must not be below
	// the backend's minimum TTL. Default DefaultTTL.
	TTL time.Duration
	// ExpirySlack is how late after a lease's TTL the backend may free the
	// key (expiry timer granularity, lease checks, elections).
	// Default DefaultExpirySlack.
	ExpirySlack time.Duration
	// GrantBound is the longest a queued waiter may wait for its grant
	// after the holder's release returns. Default DefaultGrantBound.
	GrantBound time.Duration

	// MutexGoroutines × MutexCycles is the size of the mutual-exclusion
	// case. Defaults 32 × 100 (the shared-counter check).
	MutexGoroutines int
	MutexCycles     int
}

// Defaults of Capabilities.
const (
	DefaultTTL         = 500 * time.Millisecond
	DefaultExpirySlack = time.Second
	DefaultGrantBound  = 2 * time.Second
	DefaultGoroutines  = 32
	DefaultCycles      = 100

	// longTTL is the TTL of leases that must not expire during a case.
	longTTL = time.Minute
	// renewTTL is the shortest TTL of the lease the renewal cases keep
	// alive (see renew). 3 s: the auto-renewal case's keep-alive renews
	// at TTL/3 and must return within 2/3 of the TTL; with 2 s (1.3 s to
	// return) raftlock's AutoRenew failed once in three clean-clone
	// `make test` runs here, its browsers and node processes beside it.
	renewTTL = 3 * time.Second
)

func (c Capabilities) withDefaults() Capabilities {
	if c.TTL == 0 {
		c.TTL = DefaultTTL
	}
	if c.ExpirySlack == 0 {
		c.ExpirySlack = DefaultExpirySlack
	}
	if c.GrantBound == 0 {
		c.GrantBound = DefaultGrantBound
	}
	if c.MutexGoroutines == 0 {
		c.MutexGoroutines = DefaultGoroutines
	}
	if c.MutexCycles == 0 {
		c.MutexCycles = DefaultCycles
	}
	return c
}

// Run runs every conformance case as a subtest of t.
func Run(t *testing.T, f Factory) {
	if f.New == nil {
		t.Fatal("locktest: Factory.New is nil")
	}
	f.Caps = f.Caps.withDefaults()
	if f.Caps.FIFO && !f.Caps.InspectWaiters {
		t.Fatal("locktest: a FIFO backend must declare InspectWaiters: the FIFO case needs it to order its waiters")
	}
	probe := f.New(t)
	if probe == nil {
		t.Fatal("locktest: Factory.New returned nil")
	}
	features := lock.FeaturesOf(probe)
	probe.Close()
	s := &suite{f: f}
	for _, c := range []struct {
		name string
		run  func(*testing.T)
		// needs: the case runs only when the backend reports these
		// features (lock.FeaturesOf); otherwise it is skipped.
		needs lock.Features
	}{
		{"MutualExclusion", s.mutualExclusion, 0},
		{"CrashedHolderExpires", s.crashedHolderExpires, 0},
		{"Renew", s.renew, 0},
		{"StaleRelease", s.staleRelease, 0},
		{"FencingTokens", s.fencingTokens, 0},
		{"BlockedAcquire", s.blockedAcquire, 0},
		{"FIFO", s.fifo, 0},
		{"TryAcquireHeld", s.tryAcquireHeld, 0},
		{"CancelledWaiter", s.cancelledWaiter, 0},
		{"Inspect", s.inspect, 0},
		{"AutoRenew", s.autoRenew, 0},
		{"InvalidInput", s.invalidInput, 0},
		{"Wanted", s.wanted, 0},
		{"Close", s.close, 0},
		// The primitives beyond the mutex. Unsupported runs on every backend: it
		// proves that a backend refuses what it does not offer.
		{"Unsupported", s.unsupported, 0},
		{"SharedExclusion", s.sharedExclusion, lock.FeatureShared},
		{"WriterNotStarved", s.writerNotStarved, lock.FeatureShared},
		{"Semaphore", s.semaphore, lock.FeatureSemaphore},
		{"MultiKey", s.multiKey, lock.FeatureMultiKey},
		{"Watch", s.watch, lock.FeatureWatch},
		{"Election", s.electionCase, lock.FeatureWatch},
		{"LockDelay", s.lockDelay, lock.FeatureLockDelay},
	} {
		if !features.Has(c.needs) {
			t.Run(c.name, func(t *testing.T) { t.Skipf("backend does not offer %v", c.needs&^features) })
			continue
		}
		t.Run(c.name, c.run)
	}
}

type suite struct{ f Factory }

// locker returns a new client that is closed when t ends.
func (s *suite) locker(t *testing.T) lock.Locker {
	t.Helper()
	l := s.f.New(t)
	if l == nil {
		t.Fatal("locktest: Factory.New returned nil")
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// key returns a key unique to this case and run.
func key(t *testing.T, suffix string) string {
	var b [4]byte
	rand.Read(b[:])
	name := strings.ReplaceAll(t.Name(), "/", ".")
	return "locktest." + name + "." + suffix + "." + hex.EncodeToString(b[:])
}

// ctx returns a context that ends after d, or when t ends.
func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// rebuild makes a fresh Lease for the same grant, as a client that stored
// (Key, Owner, Token, Handle) would after a restart. Its local deadline is in
// the future, so only the backend can tell that it no longer holds.
func rebuild(l *lock.Lease) *lock.Lease {
	return kit.NewLease(kit.Grant{
		Key: l.Key, Owner: l.Owner, Token: l.Token, Handle: l.Handle, Value: l.Value,
		TTL: longTTL, Sent: time.Now(),
	})
}

// mustAcquire acquires key or ends the test.
func mustAcquire(t *testing.T, l lock.Locker, key string, opts lock.AcquireOptions, wait time.Duration) *lock.Lease {
	t.Helper()
	lease, err := l.Acquire(ctx(t, wait), key, opts)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	if lease == nil || lease.Key != key {
		t.Fatalf("Acquire(%q) returned lease %+v", key, lease)
	}
	return lease
}

// mustRelease releases lease or ends the test.
func mustRelease(t *testing.T, l lock.Locker, lease *lock.Lease) {
	t.Helper()
	if err := l.Release(ctx(t, time.Minute), lease); err != nil {
		t.Fatalf("Release(%q, token %d): %v", lease.Key, lease.Token, err)
	}
}

// wantErr fails the test unless err matches target.
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one matching %v", what, err, target)
	}
}

// holderToken returns the token Inspect reports for key (0 if none).
func holderToken(t *testing.T, l lock.Locker, key string) lock.Token {
	t.Helper()
	info, err := l.Inspect(ctx(t, time.Minute), key)
	if err != nil {
		t.Errorf("Inspect(%q): %v", key, err)
		return 0
	}
	return info.Token
}

// awaitWaiters waits until n callers are queued on key. Without
// InspectWaiters the backend offers no event to wait for, so it gives the
// waiters a moment to reach the backend instead; the cases that use it stay
// correct either way, they only test less.
func (s *suite) awaitWaiters(t *testing.T, l lock.Locker, key string, n int) {
	t.Helper()
	if !s.f.Caps.InspectWaiters {
		time.Sleep(100 * time.Millisecond)
		return
	}
	deadline := time.Now().Add(s.f.Caps.GrantBound)
	for {
		info, err := l.Inspect(ctx(t, time.Minute), key)
		if err == nil && info.Waiters >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) never reported %d waiters (last: %+v, %v)", key, n, info, err)
		}
		time.Sleep(time.Millisecond)
	}
}
