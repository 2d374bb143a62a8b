package client_test

import (
	"context"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

func tctx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func mustAcq(t *testing.T, c *client.Client, key string, opts lock.AcquireOptions) *lock.Lease {
	t.Helper()
	l, err := c.Acquire(tctx(t), key, opts)
	if err != nil {
		t.Fatalf("Acquire(%q): %v", key, err)
	}
	return l
}

func mustRel(t *testing.T, c *client.Client, l *lock.Lease) {
	t.Helper()
	if err := c.Release(tctx(t), l); err != nil {
		t.Fatalf("Release(%q): %v", l.Key, err)
	}
}

// TestCacheHit: a released lease is kept and handed out again, with the
// same token, without the server seeing a release; the server still has
// it held meanwhile; a second Release of the kept lease is not_held.
func TestCacheHit(t *testing.T) {
	store := locktest.NewMemStore()
	addr := startMemGateway(t, store)
	a := newClient(t, []string{addr}, client.Options{CacheLeases: true})
	other := newClient(t, []string{addr}, client.Options{})

	first := mustAcq(t, a, "k", lock.AcquireOptions{})
	mustRel(t, a, first)
	if err := a.Release(tctx(t), first); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release of a kept lease: %v, want ErrNotHeld", err)
	}
	info, err := other.Inspect(tctx(t), "k")
	if err != nil || info.Token != first.Token {
		t.Fatalf("while cached, the server shows %+v, %v; want it held with token %d", info, err, first.Token)
	}
	again := mustAcq(t, a, "k", lock.AcquireOptions{})
	if again != first || again.Token != first.Token {
		t.Fatalf("re-acquire returned token %d (lease %p), want the cached lease %p with token %d", again.Token, again, first, first.Token)
	}
	if s := a.CacheStats(); s.Hits != 1 || s.Kept != 1 || s.Misses != 1 {
		t.Fatalf("stats %+v, want 1 hit, 1 kept, 1 miss", s)
	}
	// Other options cannot be served by the kept lease: it is released
	// and a new grant made.
	mustRel(t, a, again)
	other2 := mustAcq(t, a, "k", lock.AcquireOptions{Value: []byte("v")})
	if other2.Token <= first.Token {
		t.Fatalf("acquire with another value got token %d, want a new grant after %d", other2.Token, first.Token)
	}
}

// TestCacheReclaim: another client's acquire of a key kept unused in a
// cache is granted at once: the server tells the caching client, which
// releases it for real. A lease in use is not taken away: its holder sees
// Wanted, and the waiter is granted only when it releases.
func TestCacheReclaim(t *testing.T) {
	store := locktest.NewMemStore()
	addr := startMemGateway(t, store)
	a := newClient(t, []string{addr}, client.Options{CacheLeases: true})
	b := newClient(t, []string{addr}, client.Options{CacheLeases: true})

	kept := mustAcq(t, a, "k", lock.AcquireOptions{})
	mustRel(t, a, kept)
	got := mustAcq(t, b, "k", lock.AcquireOptions{})
	if got.Token <= kept.Token {
		t.Fatalf("b's token %d, want > %d", got.Token, kept.Token)
	}
	if s := a.CacheStats(); s.Reclaimed != 1 || s.Unused != 0 {
		t.Fatalf("a's stats %+v, want 1 reclaimed, 0 unused", s)
	}

	// got is in use by b: a waits, b hears it is wanted and decides.
	waiting := make(chan *lock.Lease, 1)
	go func() {
		l, err := a.Acquire(tctx(t), "k", lock.AcquireOptions{})
		if err != nil {
			t.Errorf("a's second acquire: %v", err)
		}
		waiting <- l
	}()
	select {
	case <-got.Wanted():
	case <-time.After(10 * time.Second):
		t.Fatal("b's lease in use never heard that a waits")
	}
	select {
	case l := <-waiting:
		t.Fatalf("a was granted token %d while b used the lease", l.Token)
	default:
	}
	mustRel(t, b, got) // wanted: released for real, not kept
	l := <-waiting
	if l == nil || l.Token <= got.Token {
		t.Fatalf("a's grant after b's release: %v", l)
	}
	if s := b.CacheStats(); s.Kept != 0 || s.Unused != 0 {
		t.Fatalf("b kept a wanted lease: %+v", s)
	}
}

// TestCacheClose: Close releases the kept leases, so that others get the
// keys at once instead of after a TTL.
func TestCacheClose(t *testing.T) {
	store := locktest.NewMemStore()
	addr := startMemGateway(t, store)
	a, err := client.New([]string{addr}, client.Options{CacheLeases: true, Logger: quiet(t)})
	if err != nil {
		t.Fatal(err)
	}
	other := newClient(t, []string{addr}, client.Options{})
	for _, k := range []string{"x", "y"} {
		mustRel(t, a, mustAcq(t, a, k, lock.AcquireOptions{}))
	}
	if s := a.CacheStats(); s.Unused != 2 {
		t.Fatalf("stats %+v, want 2 unused", s)
	}
	a.Close()
	for _, k := range []string{"x", "y"} {
		l, err := other.TryAcquire(tctx(t), k, lock.AcquireOptions{})
		if err != nil {
			t.Fatalf("TryAcquire(%q) after the caching client closed: %v", k, err)
		}
		mustRel(t, other, l)
	}
}

// TestCacheIdle: an unused lease is released for real after CacheIdle.
func TestCacheIdle(t *testing.T) {
	store := locktest.NewMemStore()
	addr := startMemGateway(t, store)
	a := newClient(t, []string{addr}, client.Options{CacheLeases: true, CacheIdle: 50 * time.Millisecond})
	l := mustAcq(t, a, "k", lock.AcquireOptions{})
	mustRel(t, a, l)
	select {
	case <-l.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("an idle cached lease was never released")
	}
	if !errors.Is(l.Err(), lock.ErrReleased) || a.CacheStats().Idle != 1 {
		t.Fatalf("idle lease ended with %v, stats %+v; want ErrReleased and 1 idle", l.Err(), a.CacheStats())
	}
}

// TestCacheNeedsWantedPushes: behind a gateway that does not announce
// "wanted" pushes nobody could reclaim a kept lease, so Release releases.
func TestCacheNeedsWantedPushes(t *testing.T) {
	store := locktest.NewMemStore()
	l := struct{ lock.Locker }{store.NewLocker()} // hides SignalsWanted
	g := gateway.New(l, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(g)
	t.Cleanup(func() { g.Close(); srv.Close(); l.Close() })
	a := newClient(t, []string{strings.TrimPrefix(srv.URL, "http://")}, client.Options{CacheLeases: true})
	lease := mustAcq(t, a, "k", lock.AcquireOptions{})
	if a.SignalsWanted() {
		t.Fatal("client reports wanted pushes from a gateway that does not announce them")
	}
	mustRel(t, a, lease)
	if !errors.Is(lease.Err(), lock.ErrReleased) || a.CacheStats().Kept != 0 {
		t.Fatalf("lease %v, stats %+v: want a real release", lease.Err(), a.CacheStats())
	}
}

// TestCacheDropsRefusedLease: a kept lease whose renewal is refused (an
// operator force-released it on raftlock) ends and is never handed out.
func TestCacheDropsRefusedLease(t *testing.T) {
	c := startRaft(t)
	leader := raftLeader(t, c)
	a := newClient(t, apiAddrs(c), client.Options{CacheLeases: true})
	kept := mustAcq(t, a, "k", lock.AcquireOptions{TTL: time.Second, AutoRenew: true})
	mustRel(t, a, kept)
	if err := leader.ForceRelease(tctx(t), "k"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-kept.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("a kept lease whose renewal the server refuses never ended")
	}
	if !errors.Is(kept.Err(), lock.ErrNotHeld) {
		t.Fatalf("kept lease ended with %v, want ErrNotHeld", kept.Err())
	}
	l := mustAcq(t, a, "k", lock.AcquireOptions{TTL: time.Second, AutoRenew: true})
	if l == kept || l.Token <= kept.Token {
		t.Fatalf("after the refused renewal the cache handed out token %d (kept %d)", l.Token, kept.Token)
	}
}

// TestCacheRenewsUnused: a kept lease that the application did not ask to
// auto-renew is renewed by the cache while it waits, and is handed out
// again after its first TTL has long passed.
func TestCacheRenewsUnused(t *testing.T) {
	store := locktest.NewMemStore()
	addr := startMemGateway(t, store)
	a := newClient(t, []string{addr}, client.Options{CacheLeases: true})
	const ttl = 300 * time.Millisecond
	l := mustAcq(t, a, "k", lock.AcquireOptions{TTL: ttl})
	first := l.Deadline()
	mustRel(t, a, l)
	// Await two renewals by the cache: the deadline passes the first one
	// by more than a TTL.
	for l.Deadline().Before(first.Add(ttl)) {
		select {
		case <-l.Done():
			t.Fatalf("the kept lease ended: %v", l.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
	again := mustAcq(t, a, "k", lock.AcquireOptions{TTL: ttl})
	if again != l || a.CacheStats().Hits != 1 {
		t.Fatalf("after the cache renewed it, re-acquire returned token %d (kept %d), stats %+v", again.Token, l.Token, a.CacheStats())
	}
}
