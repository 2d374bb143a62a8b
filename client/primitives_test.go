package client_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// The primitives beyond the mutex through the SDK, beside the conformance suite
// (which runs their cases through it): what is the SDK's own.

// TestFeaturesFromHandshake: a fresh client reports its gateway's
// features (Features waits for the first connection); a client that
// cannot connect reports none, within RequestTimeout.
func TestFeaturesFromHandshake(t *testing.T) {
	for _, f := range []lock.Features{lock.AllFeatures, lock.FeatureShared | lock.FeatureWatch, 0} {
		_, addr := startGatewayOver(t, locktest.NewMemStoreWithFeatures(f).NewLocker())
		c := newClient(t, []string{addr}, client.Options{})
		if got := lock.FeaturesOf(c); got != f {
			t.Errorf("FeaturesOf(client) = %v, want the gateway's %v", got, f)
		}
	}
	c := newClient(t, []string{"127.0.0.1:1"}, client.Options{RequestTimeout: 100 * time.Millisecond})
	start := time.Now()
	if got := c.Features(); got != 0 {
		t.Errorf("Features of a client that never connected = %v", got)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("Features waited %v for a connection that cannot happen", d)
	}
}

// TestUnsupportedFromGateway: a gateway whose backend lacks a feature
// answers unsupported; the SDK's error is a *lock.UnsupportedError naming
// the feature.
func TestUnsupportedFromGateway(t *testing.T) {
	_, addr := startGatewayOver(t, locktest.NewMemStoreWithFeatures(0).NewLocker())
	c := newClient(t, []string{addr}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	check := func(what string, err error, want lock.Features) {
		t.Helper()
		var ue *lock.UnsupportedError
		if !errors.Is(err, lock.ErrUnsupported) || !errors.As(err, &ue) || ue.Feature != want {
			t.Errorf("%s: %v, want an UnsupportedError for %v", what, err, want)
		}
	}
	_, err := c.TryAcquire(ctx, "k", lock.AcquireOptions{Mode: lock.ModeShared})
	check("shared", err, lock.FeatureShared)
	_, err = c.Acquire(ctx, "k", lock.AcquireOptions{Permits: 2})
	check("semaphore", err, lock.FeatureSemaphore)
	_, err = c.TryAcquire(ctx, "k", lock.AcquireOptions{LockDelay: time.Second})
	check("lock-delay", err, lock.FeatureLockDelay)
	_, err = c.AcquireAll(ctx, []string{"a", "b"}, lock.AcquireOptions{})
	check("acquireAll", err, lock.FeatureMultiKey)
	_, err = c.Watch(ctx, "k")
	check("watch", err, lock.FeatureWatch)
}

// TestCacheKeepsOnlyPlainLeases: with the lease cache on, a shared, a
// semaphore and a lock-delay lease are released for real, an exclusive
// one is kept; an AcquireAll or a shared Acquire of a key whose exclusive
// lease is kept unused gives that lease up first instead of waiting
// behind it.
func TestCacheKeepsOnlyPlainLeases(t *testing.T) {
	_, addr := startGatewayOver(t, locktest.NewMemStore().NewLocker())
	c := newClient(t, []string{addr}, client.Options{CacheLeases: true, CacheIdle: time.Minute})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i, opts := range []lock.AcquireOptions{
		{Mode: lock.ModeShared, TTL: time.Minute},
		{Permits: 3, TTL: time.Minute},
		{LockDelay: time.Second, TTL: time.Minute},
	} {
		key := "nc" + string(rune('a'+i))
		l, err := c.Acquire(ctx, key, opts)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Inspect(ctx, key); !errors.Is(err, lock.ErrNotFound) {
			t.Errorf("%+v: after Release, Inspect = %v; want the lease released for real", opts, err)
		}
	}
	if s := c.CacheStats(); s.Kept != 0 {
		t.Fatalf("cache stats %+v: kept a lease it must not", s)
	}
	keep := func(key string) {
		l, err := c.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Release(ctx, l); err != nil {
			t.Fatal(err)
		}
	}
	keep("kx")
	if s := c.CacheStats(); s.Kept != 1 || s.Unused != 1 {
		t.Fatalf("cache stats %+v: want the exclusive lease kept", s)
	}
	// Bounded well below CacheIdle: waiting behind the kept lease fails.
	wctx, wcancel := context.WithTimeout(ctx, 3*time.Second)
	defer wcancel()
	ls, err := c.AcquireAll(wctx, []string{"ky", "kx"}, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("AcquireAll over a kept lease: %v", err)
	}
	if err := lock.ReleaseAll(ctx, c, ls); err != nil {
		t.Fatal(err)
	}
	keep("kz")
	sl, err := c.Acquire(wctx, "kz", lock.AcquireOptions{Mode: lock.ModeShared, TTL: time.Minute})
	if err != nil {
		t.Fatalf("shared Acquire over a kept exclusive lease: %v", err)
	}
	if sl.Mode != lock.ModeShared {
		t.Errorf("lease mode %v, want shared", sl.Mode)
	}
}

// TestWatchEndsOnConnectionLoss: a watch whose connection ends (the
// gateway goes away) gets an EventError matching lock.ErrUnavailable,
// then its channel closes; the caller watches again.
func TestWatchEndsOnConnectionLoss(t *testing.T) {
	store := locktest.NewMemStore()
	g, addr := startGatewayOver(t, store.NewLocker())
	c := newClient(t, []string{addr}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := c.Watch(ctx, "w")
	if err != nil {
		t.Fatal(err)
	}
	if ev := <-ch; ev.Type != lock.EventSynced {
		t.Fatalf("first event %+v: want synced", ev)
	}
	g.Close()
	var last lock.Event
	for ev := range ch {
		last = ev
	}
	if last.Type != lock.EventError || !errors.Is(last.Err, lock.ErrUnavailable) {
		t.Fatalf("last event %+v: want an EventError matching ErrUnavailable", last)
	}
}

// TestWatchCallerNotReading: a caller that does not read its channel
// gets, once the client's buffer fills, an EventError matching
// lock.ErrWatchOverflow after the events before it; the connection's
// other calls are not held up meanwhile.
func TestWatchCallerNotReading(t *testing.T) {
	store := locktest.NewMemStore()
	_, addr := startGatewayOver(t, store.NewLocker())
	c := newClient(t, []string{addr}, client.Options{})
	overflowed := make(chan struct{})
	client.OnWatchOverflow(c, func() { close(overflowed) })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ch, err := c.Watch(ctx, "busy")
	if err != nil {
		t.Fatal(err)
	}
	// The churn goes through the gateway too: paced by its round trips,
	// it cannot outrun the gateway's own reading of the store's events
	// (the store would drop the watch first), only the caller here.
	l := newClient(t, []string{addr}, client.Options{})
churn:
	for i := 0; ; i++ {
		select {
		case <-overflowed:
			break churn
		default:
		}
		if ctx.Err() != nil {
			t.Fatalf("no overflow after %d cycles", i)
		}
		lease, err := l.TryAcquire(ctx, "busy", lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if err := l.Release(ctx, lease); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Inspect(ctx, "other"); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("Inspect while a watch is stuck: %v", err)
	}
	n := 0
	var last lock.Event
	for ev := range ch {
		n++
		last = ev
	}
	if last.Type != lock.EventError || !errors.Is(last.Err, lock.ErrWatchOverflow) || n < 2 {
		t.Fatalf("%d events, the last %+v: want events, then an EventError matching ErrWatchOverflow", n, last)
	}
}
