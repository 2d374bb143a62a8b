package zklike

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestEligibility: the rule every contender follows, on directories
// written as strings: X exclusive, R a reader, digits a semaphore permit
// of that N, m an AcquireAll contender not yet flagged; the want string
// has h for a holder and . for a waiter (an eligible unflagged AcquireAll
// contender is not a holder).
func TestEligibility(t *testing.T) {
	for _, tc := range []struct{ dir, want string }{
		{"X", "h"},
		{"XX", "h."},
		{"RRR", "hhh"},
		{"RXR", "h.."}, // the reader after a waiting writer waits: no starvation
		{"XRR", "h.."},
		{"RRXRR", "hh..."},
		{"3333", "hhh."},
		{"333X3", "hhh.."},
		{"2", "h"},
		{"mX", ".."}, // an unflagged AcquireAll contender holds nothing, but is first
		{"RmR", "h.h"},
	} {
		var es []entry
		for i, ch := range tc.dir {
			rec := record{}
			switch {
			case ch == 'R':
				rec.Shared = true
			case ch >= '1' && ch <= '9':
				rec.Shared, rec.Permits = true, int(ch-'0')
			case ch == 'm':
				rec.Multi = true
			}
			if ch == 'm' && i > 0 {
				rec.Shared = true // a reader's AcquireAll among readers
			}
			es = append(es, entry{kv: &mvccpb.KeyValue{CreateRevision: int64(10 + i)}, rec: rec})
		}
		got := ""
		for _, h := range holders(es) {
			if h {
				got += "h"
			} else {
				got += "."
			}
		}
		if got != tc.want {
			t.Errorf("holders(%s) = %s, want %s", tc.dir, got, tc.want)
		}
	}
}

func mustAcquire(t *testing.T, l *Locker, key string, opts lock.AcquireOptions) *lock.Lease {
	t.Helper()
	lease, err := l.Acquire(bg(t, 30*time.Second), key, opts)
	if err != nil {
		t.Fatalf("Acquire(%q, %v): %v", key, opts.Mode, err)
	}
	return lease
}

func mustRelease(t *testing.T, l *Locker, lease *lock.Lease) {
	t.Helper()
	if err := l.Release(bg(t, 30*time.Second), lease); err != nil {
		t.Fatalf("Release(%q, %d): %v", lease.Key, lease.Token, err)
	}
}

func pending(t *testing.T, ch <-chan result, why string) {
	t.Helper()
	select {
	case r := <-ch:
		t.Fatalf("granted (%v, %v) although %s", r.lease, r.err, why)
	default:
	}
}

func granted(t *testing.T, ch <-chan result, why string) *lock.Lease {
	t.Helper()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("%s: %v", why, r.err)
		}
		return r.lease
	case <-time.After(20 * time.Second):
		t.Fatalf("not granted: %s", why)
	}
	return nil
}

var (
	shared = lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared}
	excl   = lock.AcquireOptions{TTL: time.Minute}
)

// TestReaderBehindWriterWaits: readers share; a writer queued behind them
// waits; a reader that comes after the writer waits behind it, although
// the key is only read-locked; the writer's token exceeds the readers'.
func TestReaderBehindWriterWaits(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b, c := newLocker(t, e, nil), newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	r1 := mustAcquire(t, a, "rw", shared)
	r2 := mustAcquire(t, b, "rw", shared) // shares at once
	w := acquireAsync(ctx, c, "rw", excl)
	awaitWaiters(t, a, "rw", 1)
	r3 := acquireAsync(ctx, b, "rw", shared)
	awaitWaiters(t, a, "rw", 2)
	if _, err := b.TryAcquire(ctx, "rw", shared); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire shared behind a waiting writer: %v, want ErrNotAcquired", err)
	}
	info, err := a.Inspect(ctx, "rw")
	if err != nil || info.Mode != lock.ModeShared || len(info.Holders) != 2 || info.Token != r1.Token {
		t.Fatalf("Inspect: %+v, %v; want the two readers", info, err)
	}
	mustRelease(t, a, r1)
	pending(t, w, "a reader still holds")
	mustRelease(t, b, r2)
	wl := granted(t, w, "writer after the readers")
	if wl.Token <= r2.Token {
		t.Errorf("writer's token %d not above the reader's %d", wl.Token, r2.Token)
	}
	pending(t, r3, "the writer holds")
	if _, err := a.TryAcquire(ctx, "rw", shared); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire shared while a writer holds: %v", err)
	}
	mustRelease(t, c, wl)
	mustRelease(t, b, granted(t, r3, "reader after the writer"))
}

// TestSemaphoreNeverExceeded: eight goroutines cycle on a semaphore of
// three permits; never more than three hold at once (counted in process),
// every grant has its own token, and the semaphore is used (more than one
// holder at once at some point).
func TestSemaphoreNeverExceeded(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	opts := lock.AcquireOptions{TTL: time.Minute, Permits: 3}
	var inside, most atomic.Int32
	var mu sync.Mutex
	tokens := map[lock.Token]bool{}
	var wg sync.WaitGroup
	for g := range 8 {
		l := newLocker(t, e, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 8 {
				lease, err := l.Acquire(bg(t, time.Minute), "sem", opts)
				if err != nil {
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				n := inside.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				mu.Lock()
				if tokens[lease.Token] {
					t.Errorf("token %d granted twice", lease.Token)
				}
				tokens[lease.Token] = true
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // hold a moment so that holds overlap
				inside.Add(-1)
				if err := l.Release(bg(t, time.Minute), lease); err != nil {
					t.Errorf("release: %v", err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if m := most.Load(); m > 3 || m < 2 {
		t.Fatalf("at most %d holders at once; want 2 or 3 of 3 permits", m)
	}
	t.Logf("most holders at once: %d", most.Load())
}

// TestPermitsMismatch: while a key is held with N permits, an acquire
// with another N (or as a read lock) fails at once; an exclusive one
// waits; once the holders are gone, another N is accepted.
func TestPermitsMismatch(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	l := newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	p := mustAcquire(t, l, "pm", lock.AcquireOptions{TTL: time.Minute, Permits: 3})
	for _, o := range []lock.AcquireOptions{{TTL: time.Minute, Permits: 4}, shared} {
		if _, err := l.Acquire(ctx, "pm", o); !errors.Is(err, lock.ErrPermitsMismatch) {
			t.Errorf("Acquire permits %d mode %v: %v, want ErrPermitsMismatch", o.Permits, o.Mode, err)
		}
		if _, err := l.TryAcquire(ctx, "pm", o); !errors.Is(err, lock.ErrPermitsMismatch) {
			t.Errorf("TryAcquire permits %d mode %v: %v, want ErrPermitsMismatch", o.Permits, o.Mode, err)
		}
	}
	if _, err := l.TryAcquire(ctx, "pm", excl); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("exclusive TryAcquire on a semaphore: %v", err)
	}
	mustRelease(t, l, p)
	mustRelease(t, l, mustAcquire(t, l, "pm", lock.AcquireOptions{TTL: time.Minute, Permits: 4}))
}

// TestMultiKeyReversedOrders: two callers acquire the same two keys in
// opposite orders, in a loop; neither deadlocks (the context bounds the
// test) and their holds never overlap.
func TestMultiKeyReversedOrders(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	var holding atomic.Int32
	var wg sync.WaitGroup
	for i, keys := range [][]string{{"ma", "mb"}, {"mb", "ma"}} {
		l := newLocker(t, e, nil)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 15 {
				leases, err := l.AcquireAll(bg(t, 30*time.Second), keys, excl)
				if err != nil {
					t.Errorf("caller %d: %v", i, err)
					return
				}
				if n := holding.Add(1); n != 1 {
					t.Errorf("caller %d holds with %d holders", i, n)
				}
				for j, lease := range leases {
					if lease.Key != keys[j] {
						t.Errorf("lease %d is for %q, want %q", j, lease.Key, keys[j])
					}
				}
				holding.Add(-1)
				if err := lock.ReleaseAll(bg(t, 30*time.Second), l, leases); err != nil {
					t.Errorf("caller %d: ReleaseAll: %v", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
}

// TestMultiKeyHoldsNoneWhileWaiting: an AcquireAll waiting for a held key
// holds none of the others (Inspect finds them free), a cancelled one
// leaves nothing behind, a TryAcquireAll on the partly held set takes
// nothing, and once the key is released the waiting AcquireAll holds
// every key, with tokens from one create revision.
func TestMultiKeyHoldsNoneWhileWaiting(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b := newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	h := mustAcquire(t, a, "k2", excl)
	if _, err := b.TryAcquireAll(ctx, []string{"k1", "k2", "k3"}, excl); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquireAll on a partly held set: %v", err)
	}
	for _, k := range []string{"k1", "k3"} {
		if info, err := a.Inspect(ctx, k); !errors.Is(err, lock.ErrNotFound) {
			t.Fatalf("Inspect(%q) after the refused TryAcquireAll: %+v, %v", k, info, err)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	ch := make(chan error, 1)
	go func() { _, err := b.AcquireAll(cctx, []string{"k1", "k2"}, excl); ch <- err }()
	awaitWaiters(t, a, "k2", 1)
	if info, err := a.Inspect(ctx, "k1"); !errors.Is(err, lock.ErrNotFound) || err == nil && info.Waiters != 1 {
		t.Fatalf("Inspect(k1) while AcquireAll waits: %+v, %v; want not held", info, err)
	}
	cancel()
	if err := <-ch; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled AcquireAll: %v", err)
	}
	for _, k := range []string{"k1", "k2"} {
		if n := countDir(t, a, k); n != map[string]int{"k1": 0, "k2": 1}[k] {
			t.Fatalf("%d contenders left on %q after the cancelled AcquireAll", n, k)
		}
	}
	type res struct {
		leases []*lock.Lease
		err    error
	}
	rc := make(chan res, 1)
	go func() { ls, err := b.AcquireAll(ctx, []string{"k3", "k1", "k2"}, excl); rc <- res{ls, err} }()
	awaitWaiters(t, a, "k2", 1)
	mustRelease(t, a, h)
	r := <-rc
	if r.err != nil {
		t.Fatal(r.err)
	}
	for i, k := range []string{"k3", "k1", "k2"} {
		info, err := a.Inspect(ctx, k)
		if err != nil || info.Token != r.leases[i].Token || r.leases[i].Key != k {
			t.Fatalf("Inspect(%q): %+v, %v; want lease %+v", k, info, err, r.leases[i])
		}
	}
	// Released one by one.
	for _, lease := range r.leases {
		mustRelease(t, b, lease)
	}
	if _, err := a.TryAcquireAll(ctx, []string{"k1", "k2", "k3"}, excl); err != nil {
		t.Fatalf("TryAcquireAll on free keys: %v", err)
	}
	if _, err := a.AcquireAll(ctx, []string{"k1", "k1"}, excl); !errors.Is(err, lock.ErrInvalidKeys) {
		t.Fatalf("AcquireAll with a key twice: %v", err)
	}
}

func countDir(t *testing.T, l *Locker, key string) int {
	t.Helper()
	dirs, _, err := l.readDirs(bg(t, 10*time.Second), []string{l.dir(key)})
	if err != nil {
		t.Fatal(err)
	}
	return len(dirs[0])
}

// nextEvent returns the watch's next event.
func nextEvent(t *testing.T, ch <-chan lock.Event) lock.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("watch closed")
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatal("no watch event within 20 s")
	}
	return lock.Event{}
}

// TestWatchEvents: a watch starts with the holders and Synced, then sees
// grants, releases and expiries in order with the right tokens and
// non-decreasing revisions; a waiter's arrival, a waiter that gives up,
// and a renewal are no events; a crashed holder's key is EventExpired.
func TestWatchEvents(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b := newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	r1 := mustAcquire(t, a, "wk", shared)
	ch, err := b.Watch(ctx, "wk")
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	expect := func(typ lock.EventType, tok lock.Token) lock.Event {
		t.Helper()
		ev := nextEvent(t, ch)
		if ev.Type != typ || tok != 0 && ev.Token != tok {
			t.Fatalf("event %v token %d (rev %d), want %v token %d", ev.Type, ev.Token, ev.Revision, typ, tok)
		}
		if ev.Revision <= last {
			t.Fatalf("revision went back: %d after %d", ev.Revision, last)
		}
		last = ev.Revision
		return ev
	}
	if ev := expect(lock.EventHolder, r1.Token); ev.Mode != lock.ModeShared {
		t.Fatalf("holder event mode %v", ev.Mode)
	}
	expect(lock.EventSynced, 0)
	// A writer waits; it gives up; neither is an event.
	wctx, cancel := context.WithCancel(ctx)
	w := acquireAsync(wctx, b, "wk", excl)
	awaitWaiters(t, a, "wk", 1)
	cancel()
	<-w
	if err := a.Renew(ctx, r1, 0); err != nil {
		t.Fatal(err)
	}
	r2 := mustAcquire(t, b, "wk", shared)
	expect(lock.EventGranted, r2.Token)
	w = acquireAsync(ctx, b, "wk", excl)
	awaitWaiters(t, a, "wk", 1)
	mustRelease(t, a, r1)
	expect(lock.EventReleased, r1.Token)
	mustRelease(t, b, r2)
	expect(lock.EventReleased, r2.Token)
	wl := granted(t, w, "writer")
	expect(lock.EventGranted, wl.Token)
	mustRelease(t, b, wl)
	expect(lock.EventReleased, wl.Token)
	// A neighbour in the watched key range (<prefix>/wk. sorts between the
	// mark <prefix>/wk and the directory's end) is no event.
	mustRelease(t, a, mustAcquire(t, a, "wk.", excl))
	// A crashed holder: a 2 s lease of its own, never renewed.
	crashed := mustAcquire(t, a, "wk", lock.AcquireOptions{TTL: etcdTTL})
	expect(lock.EventGranted, crashed.Token)
	expect(lock.EventExpired, crashed.Token)
	// AcquireAll: granted once flagged, with its token.
	ls, err := a.AcquireAll(ctx, []string{"other", "wk"}, excl)
	if err != nil {
		t.Fatal(err)
	}
	expect(lock.EventGranted, ls[1].Token)
	mustRelease(t, a, ls[1])
	expect(lock.EventReleased, ls[1].Token)
	select {
	case ev := <-ch:
		t.Fatalf("unexpected event %+v", ev)
	default:
	}
}

// TestLockDelay: a holder with a lock-delay that stops renewing keeps the
// key from the next caller until its TTL and then the delay have passed
// (judged from its grant's send time); a TryAcquire in that window is
// refused; a holder with a lock-delay that releases delays nobody.
func TestLockDelay(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b := newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	opts := lock.AcquireOptions{TTL: etcdTTL, LockDelay: time.Second}
	sent := time.Now()
	crashed := mustAcquire(t, a, "ld", opts)
	if crashed.TTL() != etcdTTL {
		t.Fatalf("lease TTL %v, want %v (the delay is not the holder's)", crashed.TTL(), etcdTTL)
	}
	w := acquireAsync(ctx, b, "ld", excl)
	<-crashed.Done() // the holder's deadline
	// Until etcd deletes the key, a TryAcquire is refused: held while
	// etcd's TTL runs, then (once the lease has less than the delay left)
	// with a DelayedError.
	var next *lock.Lease
	sawDelayed := false
	for next == nil {
		_, err := b.TryAcquire(ctx, "ld", excl)
		var delayed *lock.DelayedError
		switch {
		case errors.As(err, &delayed):
			sawDelayed = true
			// A copy of the expired lease (as the gateway rebuilds one)
			// cannot renew it back to life within the delay.
			if err := a.Renew(ctx, rebuild(crashed), 0); !errors.Is(err, lock.ErrNotHeld) {
				t.Fatalf("Renew of a lease in its lock-delay: %v, want ErrNotHeld", err)
			}
			// Inspect agrees: nobody holds the key (or the waiter does by now).
			if info, err := b.Inspect(ctx, "ld"); err == nil && info.Token == crashed.Token {
				t.Fatalf("Inspect in the lock-delay reports the expired holder: %+v", info)
			}
		case !errors.Is(err, lock.ErrNotAcquired):
			t.Fatalf("TryAcquire within the lock-delay: %v", err)
		}
		select {
		case r := <-w:
			if r.err != nil {
				t.Fatal(r.err)
			}
			next = r.lease
		case <-time.After(50 * time.Millisecond):
		}
	}
	if !sawDelayed {
		t.Errorf("no TryAcquire between the holder's TTL and the end of its lock-delay got a DelayedError")
	}
	if d := time.Since(sent); d < etcdTTL+time.Second {
		t.Fatalf("granted %v after the crashed holder's grant was sent; want at least TTL + delay = %v", d, etcdTTL+time.Second)
	}
	mustRelease(t, b, next)

	// A release ends no delay: the next TryAcquire succeeds at once.
	held := mustAcquire(t, a, "ld2", lock.AcquireOptions{TTL: time.Minute, LockDelay: time.Minute})
	mustRelease(t, a, held)
	if _, err := b.TryAcquire(ctx, "ld2", excl); err != nil {
		t.Fatalf("TryAcquire after a release of a lock-delayed lease: %v", err)
	}
	// Renew keeps the holder's TTL, not the delay's.
	r := mustAcquire(t, a, "ld3", lock.AcquireOptions{TTL: 3 * time.Second, LockDelay: 2 * time.Second})
	if err := a.Renew(ctx, r, 0); err != nil || r.TTL() != 3*time.Second {
		t.Fatalf("Renew: %v, TTL %v; want 3s", err, r.TTL())
	}
	info, err := a.Inspect(ctx, "ld3")
	if err != nil || time.Until(info.Expires) > 3*time.Second+500*time.Millisecond {
		t.Fatalf("Inspect: %+v, %v; want Expires within the holder's 3 s TTL", info, err)
	}
}

// TestFeatures: zklike reports every primitive.
func TestFeatures(t *testing.T) {
	if f := lock.FeaturesOf(&Locker{}); f != lock.AllFeatures {
		t.Fatalf("Features = %v, want %v", f, lock.AllFeatures)
	}
}

// TestWantedShared: a reader that shares the key does not make the
// readers holding it wanted; a writer queued behind them does; a permit
// taken while permits are left makes nobody wanted, one that must wait
// makes every permit holder wanted (each in another Locker, so that the
// watch, not the local shortcut, tells them).
func TestWantedShared(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	a, b, c := newLocker(t, e, nil), newLocker(t, e, nil), newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	r1 := mustAcquire(t, a, "ws", shared)
	r2 := mustAcquire(t, b, "ws", shared)
	// The watch applied r2's creation before a later one arrives: sync
	// on a writer on another key, whose creation comes after r2's.
	other := mustAcquire(t, a, "ws-sync", excl)
	w2 := acquireAsync(ctx, b, "ws-sync", excl)
	wantedWithin(t, other, 10*time.Second, "a writer waits for it")
	notWantedNow(t, r1, "another reader shares the key")
	w := acquireAsync(ctx, c, "ws", excl)
	wantedWithin(t, r1, 10*time.Second, "a writer waits behind it")
	wantedWithin(t, r2, 10*time.Second, "a writer waits behind it")
	mustRelease(t, a, other)
	mustRelease(t, b, granted(t, w2, "ws-sync writer"))
	mustRelease(t, a, r1)
	mustRelease(t, b, r2)
	mustRelease(t, c, granted(t, w, "writer"))

	sem := lock.AcquireOptions{TTL: time.Minute, Permits: 2}
	p1 := mustAcquire(t, a, "wsem", sem)
	p2 := mustAcquire(t, b, "wsem", sem) // the last permit: nobody waits
	third := acquireAsync(ctx, c, "wsem", sem)
	wantedWithin(t, p1, 10*time.Second, "a third permit waits")
	wantedWithin(t, p2, 10*time.Second, "a third permit waits")
	mustRelease(t, a, p1)
	p3 := granted(t, third, "third permit")
	notWantedNow(t, p3, "nobody waits behind it")
	mustRelease(t, b, p2)
	mustRelease(t, c, p3)
}

// TestWatchCompacted: a watch that must resume from a revision etcd has
// compacted away ends with EventError wrapping ErrWatchOverflow, then
// closes (it cannot know what it missed).
func TestWatchCompacted(t *testing.T) {
	t.Parallel()
	e := testenv.StartEtcd(t, 1)
	l := newLocker(t, e, nil)
	ctx := bg(t, time.Minute)
	for range 3 {
		mustRelease(t, l, mustAcquire(t, l, "wc", excl))
	}
	raw := rawClient(t, e.Endpoints...)
	resp, err := raw.Get(ctx, "any")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Compact(ctx, resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	out := make(chan lock.Event, 8)
	w := &watch{l: l, key: "wc", dir: l.dir("wc"), mark: l.markKey("wc"), held: make(map[int64]bool)}
	go func() { defer close(out); w.run(ctx, out, 1) }() // as if cut off since revision 1
	if ev := nextEvent(t, out); ev.Type != lock.EventSynced {
		t.Fatalf("first event %v, want synced", ev.Type)
	}
	ev := nextEvent(t, out)
	if ev.Type != lock.EventError || !errors.Is(ev.Err, lock.ErrWatchOverflow) {
		t.Fatalf("event %v (%v), want an error matching ErrWatchOverflow", ev.Type, ev.Err)
	}
	if _, ok := <-out; ok {
		t.Fatal("watch not closed after its error")
	}
}
