package locktest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// unsupported: for every primitive the Locker does not report (lock.Features),
// a request that needs it fails with an error matching lock.ErrUnsupported
// and holds nothing: a backend never pretends (a shared acquire served as an
// exclusive one, a lock-delay silently dropped). And a Locker that reports a
// feature implements its interface. Runs on every backend.
func (s *suite) unsupported(t *testing.T) {
	caps := s.f.Caps
	a, b := s.locker(t), s.locker(t)
	have := lock.FeaturesOf(a)
	t.Logf("features: %v", have)
	if _, ok := a.(lock.MultiLocker); have.Has(lock.FeatureMultiKey) && !ok {
		t.Errorf("reports %v but %T is not a lock.MultiLocker", lock.FeatureMultiKey, a)
	}
	if _, ok := a.(lock.Watcher); have.Has(lock.FeatureWatch) && !ok {
		t.Errorf("reports %v but %T is not a lock.Watcher", lock.FeatureWatch, a)
	}
	if have.Has(lock.AllFeatures) {
		t.Log("offers every primitive: nothing to refuse")
	}
	refused := func(t *testing.T, what string, lease *lock.Lease, err error, l lock.Locker, f lock.Features) {
		t.Helper()
		if lease != nil {
			t.Errorf("%s granted token %d although the backend does not offer %v", what, lease.Token, f)
			l.Release(ctx(t, time.Minute), lease)
			return
		}
		if !errors.Is(err, lock.ErrUnsupported) {
			t.Errorf("%s without %v: got error %v, want one matching %v", what, f, err, lock.ErrUnsupported)
		}
	}
	for _, tc := range []struct {
		f    lock.Features
		opts lock.AcquireOptions
	}{
		{lock.FeatureShared, lock.AcquireOptions{Mode: lock.ModeShared}},
		{lock.FeatureSemaphore, lock.AcquireOptions{Permits: 3}},
		{lock.FeatureLockDelay, lock.AcquireOptions{LockDelay: time.Second}},
	} {
		if have.Has(tc.f) {
			continue
		}
		t.Run(tc.f.String(), func(t *testing.T) {
			k := key(t, "k")
			o := tc.opts
			o.TTL, o.Owner = longTTL, "refused"
			lease, err := a.TryAcquire(ctx(t, caps.GrantBound), k, o)
			refused(t, "TryAcquire", lease, err, a, tc.f)
			lease, err = a.Acquire(ctx(t, caps.GrantBound), k, o)
			refused(t, "Acquire", lease, err, a, tc.f)
			s.free(t, b, k)
		})
	}
	if !have.Has(lock.FeatureMultiKey) {
		t.Run("multikey", func(t *testing.T) {
			ks := []string{key(t, "k1"), key(t, "k2")}
			o := lock.AcquireOptions{TTL: longTTL, Owner: "refused"}
			leases, err := lock.AcquireAll(ctx(t, caps.GrantBound), a, ks, o)
			refusedAll(t, "lock.AcquireAll", leases, err, a)
			if m, ok := a.(lock.MultiLocker); ok {
				leases, err = m.AcquireAll(ctx(t, caps.GrantBound), ks, o)
				refusedAll(t, "AcquireAll", leases, err, a)
				leases, err = m.TryAcquireAll(ctx(t, caps.GrantBound), ks, o)
				refusedAll(t, "TryAcquireAll", leases, err, a)
			}
			s.free(t, b, ks...)
		})
	}
	if !have.Has(lock.FeatureWatch) {
		t.Run("watch", func(t *testing.T) {
			k := key(t, "k")
			if _, err := lock.Watch(ctx(t, caps.GrantBound), a, k); !errors.Is(err, lock.ErrUnsupported) {
				t.Errorf("lock.Watch without %v: got error %v, want one matching %v", lock.FeatureWatch, err, lock.ErrUnsupported)
			}
			if w, ok := a.(lock.Watcher); ok {
				if _, err := w.Watch(ctx(t, caps.GrantBound), k); !errors.Is(err, lock.ErrUnsupported) {
					t.Errorf("Watch without %v: got error %v, want one matching %v", lock.FeatureWatch, err, lock.ErrUnsupported)
				}
			}
		})
	}
}

func refusedAll(t *testing.T, what string, leases []*lock.Lease, err error, l lock.Locker) {
	t.Helper()
	if err == nil || len(leases) > 0 {
		t.Errorf("%s granted %d leases (err %v) although the backend does not offer %v", what, len(leases), err, lock.FeatureMultiKey)
		lock.ReleaseAll(ctx(t, time.Minute), l, leases)
		return
	}
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("%s without %v: got error %v, want one matching %v", what, lock.FeatureMultiKey, err, lock.ErrUnsupported)
	}
}

// free checks that nobody holds keys: an exclusive TryAcquire through l
// succeeds (and is released).
func (s *suite) free(t *testing.T, l lock.Locker, keys ...string) {
	t.Helper()
	for _, k := range keys {
		lease, err := l.TryAcquire(ctx(t, time.Minute), k, lock.AcquireOptions{TTL: longTTL, Owner: "third"})
		if err != nil {
			t.Errorf("%q is not free: %v", k, err)
			continue
		}
		mustRelease(t, l, lease)
	}
}

func sharedOpts(owner string) lock.AcquireOptions {
	return lock.AcquireOptions{TTL: longTTL, Mode: lock.ModeShared, Owner: owner}
}

// sharedExclusion: shared holders hold together (three at once), an
// exclusive acquire waits while any shared holder holds and a shared one
// while the exclusive holder holds, and an exclusive grant's token exceeds
// every earlier shared grant's. Then a mixed workload (goroutines taking the
// key shared or exclusive at random, briefly) never has an exclusive holder
// beside any other holder, by in-process counters.
func (s *suite) sharedExclusion(t *testing.T) {
	caps := s.f.Caps
	t.Run("Readers", func(t *testing.T) {
		k := key(t, "k")
		ls := []lock.Locker{s.locker(t), s.locker(t), s.locker(t)}
		readers := make([]*lock.Lease, len(ls))
		for i, l := range ls {
			// Each is granted while the earlier ones hold.
			readers[i] = mustAcquire(t, l, k, sharedOpts(fmt.Sprintf("reader-%d", i)), caps.GrantBound)
		}
		for i, r := range readers {
			select {
			case <-r.Done():
				t.Fatalf("reader %d's lease ended: %v", i, r.Err())
			default:
			}
		}
		if info, err := ls[0].Inspect(ctx(t, time.Minute), k); err != nil {
			t.Errorf("Inspect: %v", err)
		} else if info.Mode != lock.ModeShared || len(info.Holders) != len(readers) {
			t.Errorf("Inspect: mode %v with %d holders, want shared with %d", info.Mode, len(info.Holders), len(readers))
		}
		w := s.locker(t)
		if l, err := w.TryAcquire(ctx(t, caps.GrantBound), k, lock.AcquireOptions{TTL: longTTL, Owner: "writer"}); err == nil {
			t.Errorf("exclusive TryAcquire granted token %d while %d shared holders held", l.Token, len(readers))
			mustRelease(t, w, l)
		} else {
			wantErr(t, "exclusive TryAcquire of a read-locked key", err, lock.ErrNotAcquired)
		}
		writer := acquireAsync(ctx(t, time.Minute), w, k, lock.AcquireOptions{TTL: longTTL, Owner: "writer"})
		s.awaitWaiters(t, ls[0], k, 1)
		for i, r := range readers {
			select {
			case res := <-writer:
				t.Fatalf("exclusive acquire returned while %d shared holders held: token %v, err %v", len(readers)-i, res.lease, res.err)
			default:
			}
			mustRelease(t, ls[i], r)
		}
		var wl *lock.Lease
		select {
		case res := <-writer:
			if res.err != nil {
				t.Fatalf("writer: %v", res.err)
			}
			wl = res.lease
		case <-time.After(caps.GrantBound):
			t.Fatalf("writer not granted within %v of the last reader's release", caps.GrantBound)
		}
		for i, r := range readers {
			if wl.Token <= r.Token {
				t.Errorf("writer's token %d, want > reader %d's %d", wl.Token, i, r.Token)
			}
		}
		late := acquireAsync(ctx(t, time.Minute), ls[0], k, sharedOpts("late-reader"))
		s.awaitWaiters(t, w, k, 1)
		select {
		case res := <-late:
			t.Fatalf("shared acquire returned while the exclusive holder held: %v, err %v", res.lease, res.err)
		default:
		}
		if l, err := ls[1].TryAcquire(ctx(t, caps.GrantBound), k, sharedOpts("try-reader")); err == nil {
			t.Errorf("shared TryAcquire granted token %d while the exclusive holder held", l.Token)
			mustRelease(t, ls[1], l)
		}
		mustRelease(t, w, wl)
		select {
		case res := <-late:
			if res.err != nil {
				t.Fatalf("late reader: %v", res.err)
			}
			if res.lease.Token <= wl.Token {
				t.Errorf("late reader's token %d, want > the writer's %d", res.lease.Token, wl.Token)
			}
			mustRelease(t, ls[0], res.lease)
		case <-time.After(caps.GrantBound):
			t.Fatalf("late reader not granted within %v of the writer's release", caps.GrantBound)
		}
	})
	t.Run("Mixed", func(t *testing.T) {
		var readers, writers, most atomic.Int64
		s.cycleHolders(t, key(t, "k"), 8, 25, func(g int, rng *rand.Rand) lock.AcquireOptions {
			o := sharedOpts(fmt.Sprintf("g%d", g))
			if rng.IntN(3) == 0 {
				o.Mode = lock.ModeExclusive
			}
			return o
		}, func(g int, rng *rand.Rand, o lock.AcquireOptions, lease *lock.Lease, errs chan<- error) {
			hold := time.Duration(rng.IntN(300)) * time.Microsecond
			if o.Mode == lock.ModeExclusive {
				if n, r := writers.Add(1), readers.Load(); n != 1 || r != 0 {
					errs <- fmt.Errorf("exclusive holder (token %d) beside %d exclusive and %d shared holders", lease.Token, n-1, r)
				}
				time.Sleep(hold)
				writers.Add(-1)
			} else {
				n := readers.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				if w := writers.Load(); w != 0 {
					errs <- fmt.Errorf("shared holder (token %d) beside %d exclusive holders", lease.Token, w)
				}
				time.Sleep(hold)
				readers.Add(-1)
			}
		})
		t.Logf("at most %d shared holders at once", most.Load())
	})
}

// cycleHolders runs goroutines goroutines on four clients, each making
// cycles acquire → hold → release cycles of key, with the options opts
// gives for each cycle; hold runs while the lease is held and sends what it
// finds wrong to errs. rng is the goroutine's own. The errors are reported
// unless the run stalled (stallGuard: then the cancellations it caused are
// not).
func (s *suite) cycleHolders(t *testing.T, key string, goroutines, cycles int,
	opts func(g int, rng *rand.Rand) lock.AcquireOptions,
	hold func(g int, rng *rand.Rand, o lock.AcquireOptions, lease *lock.Lease, errs chan<- error)) {
	t.Helper()
	ls := []lock.Locker{s.locker(t), s.locker(t), s.locker(t), s.locker(t)}
	var grants atomic.Int64
	c, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stalled := s.stallGuard(t, c, cancel, &grants)
	errs := make(chan error, goroutines*cycles*2)
	var wg sync.WaitGroup
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(g), uint64(time.Now().UnixNano())))
			l := ls[g%len(ls)]
			for i := range cycles {
				o := opts(g, rng)
				lease, err := l.Acquire(c, key, o)
				if err != nil {
					errs <- fmt.Errorf("g%d cycle %d: Acquire %v, %d permits: %w", g, i, o.Mode, o.Permits, err)
					return
				}
				grants.Add(1)
				hold(g, rng, o, lease, errs)
				if err := l.Release(c, lease); err != nil {
					errs <- fmt.Errorf("g%d cycle %d: Release: %w", g, i, err)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	close(errs)
	reportErrsUnless(t, errs, stalled)
}

// reportErrs reports the first five errors of errs and how many more.
func reportErrs(t *testing.T, errs <-chan error) {
	t.Helper()
	n := 0
	for err := range errs {
		if n++; n <= 5 {
			t.Error(err)
		}
	}
	if n > 5 {
		t.Errorf("... and %d more errors", n-5)
	}
}

// writerNotStarved: while shared holders keep re-acquiring, their holds
// overlapping so that the key is never free of readers, a queued exclusive
// caller is granted within the readers' hold + GrantBound — readers that
// came after it queue behind it (checked by token too, where the backend
// reports its waiters: every reader that asked after the writer was seen
// queued holds a higher token than the writer).
func (s *suite) writerNotStarved(t *testing.T) {
	caps := s.f.Caps
	k := key(t, "k")
	const readers, hold = 4, 40 * time.Millisecond
	type grant struct {
		token lock.Token
		asked time.Time
	}
	var (
		mu      sync.Mutex
		grants  []grant
		holding atomic.Int64
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	started := make(chan struct{}, readers)
	errs := make(chan error, 1000)
	c, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for i := range readers {
		l := s.locker(t)
		wg.Add(1)
		go func() {
			defer wg.Done()
			time.Sleep(time.Duration(i) * hold / readers) // stagger: the holds overlap
			for first := true; ; first = false {
				select {
				case <-stop:
					return
				default:
				}
				asked := time.Now()
				lease, err := l.Acquire(c, k, sharedOpts(fmt.Sprintf("reader-%d", i)))
				if err != nil {
					if c.Err() == nil {
						errs <- fmt.Errorf("reader %d: %w", i, err)
					}
					return
				}
				mu.Lock()
				grants = append(grants, grant{lease.Token, asked})
				mu.Unlock()
				holding.Add(1)
				if first {
					started <- struct{}{}
				}
				time.Sleep(hold)
				holding.Add(-1)
				// Not c: finish cancels c while readers hold, and their
				// releases must still go through.
				if err := l.Release(ctx(t, time.Minute), lease); err != nil {
					errs <- fmt.Errorf("reader %d: Release: %w", i, err)
					return
				}
			}
		}()
	}
	finish := func() {
		close(stop)
		cancel()
		wg.Wait()
		close(errs)
		reportErrs(t, errs)
	}
	for range readers {
		select {
		case <-started:
		case <-time.After(2 * caps.GrantBound):
			finish()
			t.Fatalf("the readers did not all get the key within %v", 2*caps.GrantBound)
		}
	}
	w := s.locker(t)
	asked := time.Now()
	writer := acquireAsync(ctx(t, time.Minute), w, k, lock.AcquireOptions{TTL: longTTL, Owner: "writer"})
	s.awaitWaiters(t, w, k, 1)
	queued := time.Now()
	bound := hold + caps.GrantBound
	var wl *lock.Lease
	select {
	case r := <-writer:
		if r.err != nil {
			finish()
			t.Fatalf("writer: %v", r.err)
		}
		wl = r.lease
		if n := holding.Load(); n != 0 {
			t.Errorf("writer granted (token %d) while %d readers held", wl.Token, n)
		}
	case <-time.After(bound):
		finish()
		t.Fatalf("writer starved: not granted within %v while readers kept re-acquiring (readers that came after it were let in)", bound)
	}
	t.Logf("writer granted %v after it asked", time.Since(asked))
	mustRelease(t, w, wl)
	finish()
	if !caps.InspectWaiters {
		return
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range grants {
		if g.asked.After(queued) && g.token < wl.Token {
			t.Errorf("a reader that asked %v after the writer was queued got token %d, before the writer's %d", g.asked.Sub(queued), g.token, wl.Token)
		}
	}
}

// semaphore: a key with 3 permits never has more than 3 holders (8
// goroutines cycling, counted in process), each permit with its own token;
// a 4th TryAcquire while 3 hold is refused, an acquire with another number
// of permits fails at once with lock.ErrPermitsMismatch, and a permit whose
// holder crashed is freed by expiry.
func (s *suite) semaphore(t *testing.T) {
	caps := s.f.Caps
	const n = 3
	sem := func(owner string, ttl time.Duration) lock.AcquireOptions {
		return lock.AcquireOptions{TTL: ttl, Permits: n, Owner: owner}
	}
	t.Run("Bound", func(t *testing.T) {
		var cur, most atomic.Int64
		var mu sync.Mutex
		tokens := map[lock.Token]bool{}
		s.cycleHolders(t, key(t, "k"), 8, 15, func(g int, _ *rand.Rand) lock.AcquireOptions {
			return sem(fmt.Sprintf("g%d", g), longTTL)
		}, func(g int, _ *rand.Rand, _ lock.AcquireOptions, lease *lock.Lease, errs chan<- error) {
			h := cur.Add(1)
			for m := most.Load(); h > m && !most.CompareAndSwap(m, h); m = most.Load() {
			}
			if h > n {
				errs <- fmt.Errorf("%d holders of a %d-permit semaphore (token %d)", h, n, lease.Token)
			}
			mu.Lock()
			if tokens[lease.Token] {
				errs <- fmt.Errorf("token %d granted twice", lease.Token)
			}
			tokens[lease.Token] = true
			mu.Unlock()
			time.Sleep(time.Duration(g%4) * 100 * time.Microsecond)
			cur.Add(-1)
		})
		t.Logf("at most %d holders at once", most.Load())
	})
	t.Run("Full", func(t *testing.T) {
		k := key(t, "k")
		ls := []lock.Locker{s.locker(t), s.locker(t), s.locker(t)}
		d := s.locker(t)
		held := make([]*lock.Lease, n)
		for i := range held {
			held[i] = mustAcquire(t, ls[i], k, sem(fmt.Sprintf("permit-%d", i), longTTL), caps.GrantBound)
			for j := range i {
				if held[j].Token == held[i].Token {
					t.Errorf("permits %d and %d share token %d", j, i, held[i].Token)
				}
			}
		}
		if info, err := d.Inspect(ctx(t, time.Minute), k); err != nil {
			t.Errorf("Inspect: %v", err)
		} else if info.Permits != n || len(info.Holders) != n {
			t.Errorf("Inspect: %d permits with %d holders, want %d and %d", info.Permits, len(info.Holders), n, n)
		}
		if l, err := d.TryAcquire(ctx(t, caps.GrantBound), k, sem("fourth", longTTL)); err == nil {
			t.Errorf("a 4th permit of %d was granted (token %d)", n, l.Token)
			mustRelease(t, d, l)
		} else {
			wantErr(t, "TryAcquire of a 4th permit", err, lock.ErrNotAcquired)
		}
		other := lock.AcquireOptions{TTL: longTTL, Permits: n + 1, Owner: "other-n"}
		if l, err := d.Acquire(ctx(t, caps.GrantBound), k, other); err == nil {
			t.Errorf("Acquire with %d permits granted token %d while held with %d", n+1, l.Token, n)
			mustRelease(t, d, l)
		} else {
			wantErr(t, "Acquire with other permits", err, lock.ErrPermitsMismatch)
		}
		if l, err := d.TryAcquire(ctx(t, caps.GrantBound), k, other); err == nil {
			t.Errorf("TryAcquire with %d permits granted token %d while held with %d", n+1, l.Token, n)
			mustRelease(t, d, l)
		} else {
			wantErr(t, "TryAcquire with other permits", err, lock.ErrPermitsMismatch)
		}
		// A crashed permit holder's permit is freed by expiry.
		mustRelease(t, ls[2], held[2])
		crashed := mustAcquire(t, ls[2], k, sem("crashed", caps.TTL), caps.GrantBound)
		next, err := d.Acquire(ctx(t, caps.TTL+caps.ExpirySlack), k, sem("next", longTTL))
		granted := time.Now()
		if err != nil {
			t.Fatalf("no permit within TTL %v + slack %v after a permit's holder crashed: %v", caps.TTL, caps.ExpirySlack, err)
		}
		if granted.Before(crashed.Deadline()) {
			t.Errorf("4th holder granted before the crashed permit holder's deadline")
		}
		mustRelease(t, d, next)
		mustRelease(t, ls[0], held[0])
		mustRelease(t, ls[1], held[1])
	})
}

// stallGuard fails t and cancels the work when progress has not moved for
// 3×GrantBound (a backend that stops granting must fail a case, not hang
// it), until c ends. The returned function reports whether it did: the
// errors the cancel causes are its consequence, not news.
func (s *suite) stallGuard(t *testing.T, c context.Context, cancel context.CancelFunc, progress *atomic.Int64) (stalled func() bool) {
	var fired atomic.Bool
	bound := s.f.Caps.GrantBound
	go func() {
		tick := time.NewTicker(bound)
		defer tick.Stop()
		last, idle := int64(-1), 0
		for {
			select {
			case <-c.Done():
				return
			case <-tick.C:
			}
			if n := progress.Load(); n != last {
				last, idle = n, 0
				continue
			}
			if idle++; idle == 3 {
				t.Errorf("no grant for %v after %d grants: waiters are not being served", 3*bound, last)
				fired.Store(true)
				cancel()
				return
			}
		}
	}()
	return fired.Load
}

// reportErrsUnless is reportErrs without the context errors a stall's
// cancel caused.
func reportErrsUnless(t *testing.T, errs <-chan error, stalled func() bool) {
	t.Helper()
	filtered := make(chan error, cap(errs))
	for err := range errs {
		if stalled() && errors.Is(err, context.Canceled) {
			continue
		}
		filtered <- err
	}
	close(filtered)
	reportErrs(t, filtered)
}
