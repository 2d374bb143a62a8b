package locktest

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// memFactory runs the suite on a MemStore with the given defects.
func memFactory(b bugs) Factory {
	store := NewMemStore()
	if b.pretendsShared {
		store = NewMemStoreWithFeatures(lock.AllFeatures &^ lock.FeatureShared)
	}
	store.bugs = b
	return Factory{
		New: func(t *testing.T) lock.Locker { return store.NewLocker() },
		Caps: Capabilities{
			FIFO: true, InspectOwner: true, InspectValue: true, InspectWaiters: true, Wanted: true,
			TTL: 200 * time.Millisecond, ExpirySlack: 500 * time.Millisecond,
			// An in-memory grant takes microseconds; a second is ample even
			// under -race beside other suites, and halves how long
			// TestBroken's children wait for what a broken locker never does.
			GrantBound: time.Second,
		},
	}
}

// TestMemStore: the reference locker passes the whole suite.
func TestMemStore(t *testing.T) {
	Run(t, memFactory(bugs{}))
}

// TestMemStoreFeatureSubsets: a MemStore without some primitives refuses
// them (the Unsupported case, which a full MemStore has nothing to refuse
// in) and still passes the cases of the features it keeps.
func TestMemStoreFeatureSubsets(t *testing.T) {
	for _, f := range []lock.Features{0, lock.FeatureShared | lock.FeatureWatch, lock.FeatureSemaphore | lock.FeatureMultiKey | lock.FeatureLockDelay} {
		t.Run(f.String(), func(t *testing.T) {
			t.Parallel()
			store := NewMemStoreWithFeatures(f)
			s := &suite{f: Factory{
				New:  func(t *testing.T) lock.Locker { return store.NewLocker() },
				Caps: memFactory(bugs{}).Caps.withDefaults(),
			}}
			s.unsupported(t)
			if l := store.NewLocker(); lock.FeaturesOf(l) != f {
				t.Errorf("FeaturesOf = %v, want %v", lock.FeaturesOf(l), f)
			}
		})
	}
}

// When an exclusive holder releases, the longest compatible prefix of the
// queue is granted together (the readers before the next writer), and a
// reader behind that writer waits for it.
func TestMemStoreGrantsSharedPrefix(t *testing.T) {
	s := NewMemStore()
	l := s.NewLocker()
	defer l.Close()
	c := context.Background()
	x, err := l.Acquire(c, "k", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	shared := lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared}
	var waiters []<-chan result
	for i, o := range []lock.AcquireOptions{shared, shared, {TTL: time.Minute}, shared} {
		waiters = append(waiters, acquireAsync(c, l, "k", o))
		for {
			if info, _ := l.Inspect(c, "k"); info.Waiters == i+1 {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
	if err := l.Release(c, x); err != nil {
		t.Fatal(err)
	}
	r0, r1 := <-waiters[0], <-waiters[1]
	if r0.err != nil || r1.err != nil {
		t.Fatal(r0.err, r1.err)
	}
	info, err := l.Inspect(c, "k")
	if err != nil || len(info.Holders) != 2 || info.Waiters != 2 || info.Mode != lock.ModeShared {
		t.Fatalf("after the release: %+v, %v; want 2 shared holders and 2 waiters", info, err)
	}
	if _, err := l.TryAcquire(c, "k", shared); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("shared TryAcquire while a writer waits: %v, want %v", err, lock.ErrNotAcquired)
	}
	l.Release(c, r0.lease)
	l.Release(c, r1.lease)
	w := <-waiters[2]
	select {
	case r := <-waiters[3]:
		t.Fatalf("the reader behind the writer was granted beside it: %+v", r)
	default:
	}
	if w.lease.Token <= r1.lease.Token {
		t.Errorf("writer's token %d, want > %d", w.lease.Token, r1.lease.Token)
	}
	l.Release(c, w.lease)
	if r := <-waiters[3]; r.err != nil || r.lease.Token <= w.lease.Token {
		t.Errorf("last reader: %+v", r)
	}
}

// A watcher that falls memWatchBuffer events behind gets
// ErrWatchOverflow, then its channel closes.
func TestMemStoreWatchOverflow(t *testing.T) {
	l := NewMemStore().NewLocker()
	defer l.Close()
	c := context.Background()
	ch, err := l.Watch(c, "k")
	if err != nil {
		t.Fatal(err)
	}
	for range memWatchBuffer {
		lease, err := l.Acquire(c, "k", lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		l.Release(c, lease)
	}
	var n int
	var last lock.Event
	for ev := range ch {
		n++
		last = ev
	}
	if n != memWatchBuffer+1 || last.Type != lock.EventError || !errors.Is(last.Err, lock.ErrWatchOverflow) {
		t.Fatalf("%d events, the last %+v; want %d, then %v", n, last, memWatchBuffer+1, lock.ErrWatchOverflow)
	}
}

// Within a lock-delay a TryAcquire is refused with a *lock.DelayedError; a
// semaphore acquire queued behind a writer that meets another N fails.
func TestMemStoreDelayedErrorAndQueuedMismatch(t *testing.T) {
	l := NewMemStore().NewLocker()
	defer l.Close()
	c := context.Background()
	crashed, err := l.Acquire(c, "d", lock.AcquireOptions{TTL: 20 * time.Millisecond, LockDelay: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	<-crashed.Done()
	for { // the store's expiry follows the lease's deadline
		if _, err := l.Inspect(c, "d"); errors.Is(err, lock.ErrNotFound) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	_, err = l.TryAcquire(c, "d", lock.AcquireOptions{TTL: time.Minute})
	var de *lock.DelayedError
	if !errors.As(err, &de) || de.Until.Before(time.Now().Add(50*time.Second)) {
		t.Errorf("TryAcquire within the lock-delay: %v, want a *lock.DelayedError until about a minute from now", err)
	}

	x, err := l.Acquire(c, "s", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	queued := func(n int) {
		for {
			if info, _ := l.Inspect(c, "s"); info.Waiters == n {
				return
			}
			time.Sleep(time.Millisecond)
		}
	}
	three := acquireAsync(c, l, "s", lock.AcquireOptions{TTL: time.Minute, Permits: 3})
	queued(1)
	four := acquireAsync(c, l, "s", lock.AcquireOptions{TTL: time.Minute, Permits: 4})
	queued(2)
	l.Release(c, x)
	if r := <-three; r.err != nil {
		t.Fatalf("3-permit waiter: %v", r.err)
	}
	if r := <-four; !errors.Is(r.err, lock.ErrPermitsMismatch) {
		t.Errorf("4-permit waiter behind a 3-permit holder: %+v, want %v", r, lock.ErrPermitsMismatch)
	}
}
