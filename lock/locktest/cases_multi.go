package locktest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

type multiResult struct {
	leases []*lock.Lease
	err    error
}

func acquireAllAsync(c context.Context, l lock.Locker, keys []string, opts lock.AcquireOptions) <-chan multiResult {
	ch := make(chan multiResult, 1)
	go func() {
		leases, err := lock.AcquireAll(c, l, keys, opts)
		ch <- multiResult{leases, err}
	}()
	return ch
}

// multiKey: AcquireAll is all or nothing — while one key is held by
// another, it holds none of the others (Inspect finds them free), and it
// is granted all of them, in the order of keys, once that key is released;
// TryAcquireAll on a partly held set holds nothing; two callers listing the
// keys in reversed orders never deadlock and never overlap; a cancelled
// AcquireAll holds nothing; the leases release one by one; a bad key set is
// lock.ErrInvalidKeys.
func (s *suite) multiKey(t *testing.T) {
	caps := s.f.Caps
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	opts := func(owner string) lock.AcquireOptions { return lock.AcquireOptions{TTL: longTTL, Owner: owner} }
	keys3 := func(t *testing.T) []string { return []string{key(t, "k1"), key(t, "k2"), key(t, "k3")} }

	t.Run("AllOrNothing", func(t *testing.T) {
		ks := keys3(t)
		blocker := mustAcquire(t, b, ks[1], opts("blocker"), time.Minute)
		all := acquireAllAsync(ctx(t, time.Minute), a, ks, opts("all"))
		s.awaitWaiters(t, b, ks[1], 1)
		select {
		case r := <-all:
			t.Fatalf("AcquireAll returned while %q was held: %d leases, err %v", ks[1], len(r.leases), r.err)
		default:
		}
		// It holds none of the others while it waits. (It is queued on
		// them, so a TryAcquire of them is refused: ask Inspect.)
		for _, k := range []string{ks[0], ks[2]} {
			if info, err := c.Inspect(ctx(t, time.Minute), k); !errors.Is(err, lock.ErrNotFound) {
				t.Errorf("Inspect(%q) while AcquireAll waits for %q: %+v, %v; want %v (it must hold none of its keys)", k, ks[1], info, err, lock.ErrNotFound)
			}
		}
		mustRelease(t, b, blocker)
		var leases []*lock.Lease
		select {
		case r := <-all:
			if r.err != nil {
				t.Fatalf("AcquireAll: %v", r.err)
			}
			leases = r.leases
		case <-time.After(caps.GrantBound):
			t.Fatalf("AcquireAll not granted within %v of the release", caps.GrantBound)
		}
		if len(leases) != len(ks) {
			t.Fatalf("AcquireAll returned %d leases for %d keys", len(leases), len(ks))
		}
		for i, l := range leases {
			if l.Key != ks[i] {
				t.Errorf("lease %d is for %q, want %q (the order of keys)", i, l.Key, ks[i])
			}
			if got := holderToken(t, c, l.Key); got != l.Token {
				t.Errorf("Inspect(%q) reports token %d, want %d", l.Key, got, l.Token)
			}
		}
		if leases[1].Token <= blocker.Token {
			t.Errorf("token of %q %d, want > the blocker's %d", ks[1], leases[1].Token, blocker.Token)
		}
		for i, l := range leases { // released one by one
			mustRelease(t, a, l)
			s.free(t, c, ks[i])
		}
	})
	t.Run("TryPartlyHeld", func(t *testing.T) {
		ks := keys3(t)
		m, ok := a.(lock.MultiLocker)
		if !ok {
			t.Fatalf("%T reports %v but is not a lock.MultiLocker", a, lock.FeatureMultiKey)
		}
		blocker := mustAcquire(t, b, ks[2], opts("blocker"), time.Minute)
		leases, err := m.TryAcquireAll(ctx(t, caps.GrantBound), ks, opts("try"))
		if err == nil {
			t.Errorf("TryAcquireAll granted %d leases while %q was held", len(leases), ks[2])
			lock.ReleaseAll(ctx(t, time.Minute), a, leases)
		} else {
			wantErr(t, "TryAcquireAll of a partly held set", err, lock.ErrNotAcquired)
		}
		s.free(t, c, ks[0], ks[1])
		mustRelease(t, b, blocker)
		leases, err = m.TryAcquireAll(ctx(t, caps.GrantBound), ks, opts("try"))
		if err != nil {
			t.Fatalf("TryAcquireAll of a free set: %v", err)
		}
		if err := lock.ReleaseAll(ctx(t, time.Minute), a, leases); err != nil {
			t.Errorf("ReleaseAll: %v", err)
		}
		s.free(t, c, ks...)
	})
	t.Run("ReversedOrders", func(t *testing.T) {
		x, y := key(t, "x"), key(t, "y")
		const rounds = 30
		var held [2]atomic.Int32
		errs := make(chan error, 4*rounds)
		var wg sync.WaitGroup
		for g, order := range [][]string{{x, y}, {y, x}} {
			l := []lock.Locker{a, b}[g]
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range rounds {
					// Each round, not the whole run, is bounded: a
					// deadlock stalls one round forever, where a loaded
					// machine only makes every round slower.
					cc, cancel := context.WithTimeout(context.Background(), 5*caps.GrantBound)
					defer cancel()
					leases, err := lock.AcquireAll(cc, l, order, opts(fmt.Sprintf("caller-%d", g)))
					if err != nil {
						errs <- fmt.Errorf("caller %d round %d: AcquireAll(%v) (deadlock?): %w", g, i, order, err)
						return
					}
					for j := range held {
						if !held[j].CompareAndSwap(0, 1) {
							errs <- fmt.Errorf("caller %d round %d: the other caller holds %q too", g, i, []string{x, y}[j])
						}
					}
					runtime.Gosched()
					for j := range held {
						held[j].Store(0)
					}
					if err := lock.ReleaseAll(cc, l, leases); err != nil {
						errs <- fmt.Errorf("caller %d round %d: %w", g, i, err)
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		reportErrs(t, errs)
	})
	t.Run("Cancelled", func(t *testing.T) {
		ks := keys3(t)
		blocker := mustAcquire(t, b, ks[1], opts("blocker"), time.Minute)
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		all := acquireAllAsync(wctx, a, ks, opts("cancelled"))
		s.awaitWaiters(t, b, ks[1], 1)
		cancel()
		select {
		case r := <-all:
			if len(r.leases) > 0 {
				t.Fatalf("cancelled AcquireAll returned %d leases", len(r.leases))
			}
			wantErr(t, "cancelled AcquireAll", r.err, context.Canceled)
		case <-time.After(caps.GrantBound):
			t.Fatalf("AcquireAll did not return within %v of its context's cancel", caps.GrantBound)
		}
		s.free(t, c, ks[0], ks[2])
		mustRelease(t, b, blocker)
		lease, err := c.Acquire(ctx(t, caps.GrantBound), ks[1], opts("afterwards"))
		if err != nil {
			t.Fatalf("%q not free within %v after the holder released and AcquireAll gave up (ghost grant?): %v", ks[1], caps.GrantBound, err)
		}
		mustRelease(t, c, lease)
	})
	t.Run("InvalidKeys", func(t *testing.T) {
		k := key(t, "k")
		many := make([]string, lock.MaxMultiKeys+1)
		for i := range many {
			many[i] = fmt.Sprintf("%s.%d", k, i)
		}
		for _, tc := range []struct {
			name string
			keys []string
		}{{"none", nil}, {"twice", []string{k, k}}, {"too many", many}} {
			leases, err := lock.AcquireAll(ctx(t, caps.GrantBound), a, tc.keys, opts("invalid"))
			if len(leases) > 0 {
				t.Errorf("%s: AcquireAll granted %d leases", tc.name, len(leases))
				lock.ReleaseAll(ctx(t, time.Minute), a, leases)
			}
			wantErr(t, "AcquireAll of keys "+tc.name, err, lock.ErrInvalidKeys)
		}
		s.free(t, c, k, many[0])
	})
}

// nextEvent returns the watch's next event, failing the test if none comes
// within d, the watch closes, or it breaks.
func nextEvent(t *testing.T, ch <-chan lock.Event, d time.Duration, what string) lock.Event {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("watch closed while waiting for %s", what)
		}
		if ev.Type == lock.EventError {
			t.Fatalf("watch broke while waiting for %s: %v", what, ev.Err)
		}
		return ev
	case <-time.After(d):
		t.Fatalf("no event within %v while waiting for %s", d, what)
	}
	return lock.Event{}
}

// watch: a watch starts with the key's holder (if any) and EventSynced,
// then reports a grant, a release, a handover to a waiter (release, then
// grant) and an expiry (a crashed holder), in order, with the right tokens
// and increasing revisions (where the backend has them); it closes without
// an EventError when its context ends.
func (s *suite) watch(t *testing.T) {
	caps := s.f.Caps
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	type step struct {
		typ   lock.EventType
		token lock.Token
		owner string
	}
	var last uint64
	expect := func(t *testing.T, ch <-chan lock.Event, d time.Duration, want step) lock.Event {
		t.Helper()
		what := fmt.Sprintf("%v of token %d", want.typ, want.token)
		ev := nextEvent(t, ch, d, what)
		if ev.Type != want.typ || (want.token != 0 && ev.Token != want.token) {
			t.Fatalf("got event %v of token %d (owner %q), want %s", ev.Type, ev.Token, ev.Owner, what)
		}
		if caps.InspectOwner && want.owner != "" && ev.Owner != "" && ev.Owner != want.owner {
			t.Errorf("%s names owner %q, want %q", what, ev.Owner, want.owner)
		}
		if ev.Revision != 0 {
			if ev.Revision < last || (ev.Revision == last && ev.Type != lock.EventSynced) {
				t.Errorf("%s has revision %d after %d, want increasing", what, ev.Revision, last)
			}
			last = ev.Revision
		}
		return ev
	}
	t.Run("FromFree", func(t *testing.T) {
		k := key(t, "k")
		last = 0
		wctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch, err := lock.Watch(wctx, c, k)
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		expect(t, ch, caps.GrantBound, step{typ: lock.EventSynced})
		g := mustAcquire(t, a, k, lock.AcquireOptions{TTL: longTTL, Owner: "first", Value: []byte("v1")}, time.Minute)
		ev := expect(t, ch, caps.GrantBound, step{lock.EventGranted, g.Token, "first"})
		if caps.InspectValue && string(ev.Value) != "v1" {
			t.Errorf("granted event's value %q, want %q", ev.Value, "v1")
		}
		mustRelease(t, a, g)
		expect(t, ch, caps.GrantBound, step{lock.EventReleased, g.Token, ""})
		crashed := mustAcquire(t, b, k, lock.AcquireOptions{TTL: caps.TTL, Owner: "crashed"}, time.Minute)
		expect(t, ch, caps.GrantBound, step{lock.EventGranted, crashed.Token, "crashed"})
		expect(t, ch, caps.TTL+caps.ExpirySlack+caps.GrantBound, step{lock.EventExpired, crashed.Token, ""})
		cancel()
		for {
			select {
			case ev, ok := <-ch:
				if !ok {
					return
				}
				if ev.Type == lock.EventError {
					t.Errorf("EventError after the watch's context ended: %v", ev.Err)
				}
				continue
			case <-time.After(caps.GrantBound):
				t.Fatalf("watch not closed within %v of its context ending", caps.GrantBound)
			}
		}
	})
	t.Run("FromHeld", func(t *testing.T) {
		k := key(t, "k")
		last = 0
		h := mustAcquire(t, a, k, lock.AcquireOptions{TTL: longTTL, Owner: "holder"}, time.Minute)
		ch, err := lock.Watch(ctx(t, time.Minute), c, k)
		if err != nil {
			t.Fatalf("Watch: %v", err)
		}
		expect(t, ch, caps.GrantBound, step{lock.EventHolder, h.Token, "holder"})
		expect(t, ch, caps.GrantBound, step{typ: lock.EventSynced})
		waiter := acquireAsync(ctx(t, time.Minute), b, k, lock.AcquireOptions{TTL: longTTL, Owner: "next"})
		s.awaitWaiters(t, a, k, 1)
		mustRelease(t, a, h)
		var next *lock.Lease
		select {
		case r := <-waiter:
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			next = r.lease
		case <-time.After(caps.GrantBound):
			t.Fatalf("waiter not granted within %v of the release", caps.GrantBound)
		}
		expect(t, ch, caps.GrantBound, step{lock.EventReleased, h.Token, ""})
		expect(t, ch, caps.GrantBound, step{lock.EventGranted, next.Token, "next"})
		mustRelease(t, b, next)
		expect(t, ch, caps.GrantBound, step{lock.EventReleased, next.Token, ""})
	})
}

// electionCase: campaigners contend for leadership through lock/election:
// at most one leader at a time (their terms, from Campaign's return to the
// earlier of Resign and the lease's deadline, checked by CheckHistory),
// Resign hands over, Observe reports every leader in the order of their
// grants, and a leader whose Locker is closed without resigning is
// succeeded after its TTL, not before its deadline.
func (s *suite) electionCase(t *testing.T) {
	caps := s.f.Caps
	k := key(t, "leader")
	octx, ocancel := context.WithCancel(context.Background())
	defer ocancel()
	leaders, err := election.Observe(octx, s.locker(t), k)
	if err != nil {
		t.Fatalf("Observe: %v", err)
	}
	select {
	case ld := <-leaders:
		if ld.Present {
			t.Fatalf("Observe of a fresh election reports leader %+v", ld)
		}
	case <-time.After(caps.GrantBound):
		t.Fatalf("Observe reported nothing within %v", caps.GrantBound)
	}
	var (
		mu       sync.Mutex
		observed []election.Leader
		tokens   []lock.Token
		rec      Recorder
	)
	obsDone := make(chan struct{})
	go func() {
		defer close(obsDone)
		for ld := range leaders {
			mu.Lock()
			observed = append(observed, ld)
			mu.Unlock()
		}
	}()
	const campaigners, terms = 3, 3
	errs := make(chan error, campaigners*terms)
	var elected atomic.Int64
	cc, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stalled := s.stallGuard(t, cc, cancel, &elected)
	var wg sync.WaitGroup
	for i := range campaigners {
		l := s.locker(t)
		name := fmt.Sprintf("candidate-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range terms {
				e, err := election.Campaign(cc, l, k, []byte(name), election.WithTTL(caps.TTL), election.WithOwner(name))
				if err != nil {
					errs <- fmt.Errorf("%s: Campaign: %w", name, err)
					return
				}
				elected.Add(1)
				start := time.Now()
				mu.Lock()
				tokens = append(tokens, e.Token())
				mu.Unlock()
				time.Sleep(5 * time.Millisecond) // lead a moment
				end := time.Now()
				if d := e.Lease.Deadline(); d.Before(end) {
					end = d
				}
				rec.Add(Hold{Key: k, Holder: name, Token: e.Token(), Start: start, End: end})
				if err := e.Resign(ctx(t, time.Minute)); err != nil {
					errs <- fmt.Errorf("%s: Resign: %w", name, err)
				}
			}
		}()
	}
	wg.Wait()
	cancel()
	close(errs)
	reportErrsUnless(t, errs, stalled)
	if stalled() {
		return
	}

	// A leader crashes: its Locker is closed without resigning.
	kl := s.f.New(t)
	t.Cleanup(func() { kl.Close() })
	killed, err := election.Campaign(ctx(t, time.Minute), kl, k, []byte("killed"), election.WithTTL(caps.TTL), election.WithOwner("killed"))
	if err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	killedStart := time.Now()
	sl := s.locker(t)
	type won struct {
		e   *election.Leadership
		err error
	}
	succ := make(chan won, 1)
	go func() {
		e, err := election.Campaign(ctx(t, caps.TTL+caps.ExpirySlack+caps.GrantBound), sl, k, []byte("successor"), election.WithTTL(longTTL), election.WithOwner("successor"))
		succ <- won{e, err}
	}()
	s.awaitWaiters(t, sl, k, 1)
	kl.Close()
	r := <-succ
	if r.err != nil {
		t.Fatalf("no new leader within TTL %v + slack after the leader's Locker was closed: %v", caps.TTL, r.err)
	}
	if now := time.Now(); now.Before(killed.Lease.Deadline()) {
		t.Errorf("successor elected %v before the crashed leader's deadline: two leaders", killed.Lease.Deadline().Sub(now))
	}
	rec.Add(Hold{Key: k, Holder: "killed", Token: killed.Token(), Start: killedStart, End: killed.Lease.Deadline()})
	rec.Add(Hold{Key: k, Holder: "successor", Token: r.e.Token(), Start: time.Now(), End: time.Now()})
	mu.Lock()
	tokens = append(tokens, killed.Token(), r.e.Token())
	mu.Unlock()
	if err := r.e.Resign(ctx(t, time.Minute)); err != nil {
		t.Errorf("successor's Resign: %v", err)
	}

	// Observe's view: every leader, in the order of their grants (tokens
	// increase with each grant of the key).
	deadline := time.Now().Add(caps.GrantBound)
	for {
		mu.Lock()
		n := len(observed)
		done := n >= 2 && !observed[n-1].Present && observed[n-2].Token == r.e.Token()
		mu.Unlock()
		if done || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	ocancel()
	<-obsDone
	var seen []lock.Token
	for _, ld := range observed {
		if ld.Present {
			seen = append(seen, ld.Token)
		}
	}
	slices.Sort(tokens)
	if !slices.Equal(seen, tokens) {
		t.Errorf("Observe saw leaders %v, want every leader in grant order %v", seen, tokens)
	}
	for i, v := range CheckHistory(rec.Holds()) {
		if i == 10 {
			t.Errorf("history: ... and more")
			break
		}
		t.Errorf("two leaders: %v", v)
	}
}

// lockDelay: a lease with TTL T and lock-delay D whose holder crashed (no
// renewal, no release) keeps its key from everyone until its expiry + D:
// a waiter is not granted before sent + T + D − drift(T + D), judged from
// the instant the crashed holder's acquire was sent, and a TryAcquire in
// that window is refused; after a release of such a lease the key is free
// at once (a TryAcquire succeeds, a waiter is granted well within D).
func (s *suite) lockDelay(t *testing.T) {
	caps := s.f.Caps
	const delay = time.Second
	a, b, c := s.locker(t), s.locker(t), s.locker(t)
	t.Run("AfterExpiry", func(t *testing.T) {
		k := key(t, "k")
		sent := time.Now()
		crashed := mustAcquire(t, a, k, lock.AcquireOptions{TTL: caps.TTL, LockDelay: delay, Owner: "crashed"}, time.Minute)
		earliest := sent.Add(caps.TTL + delay - lock.Drift(caps.TTL+delay, 0))
		select {
		case <-crashed.Done():
		case <-time.After(caps.TTL + caps.GrantBound):
			t.Fatalf("crashed lease's Done did not close after its TTL")
		}
		l, err := c.TryAcquire(ctx(t, caps.GrantBound), k, lock.AcquireOptions{TTL: longTTL, Owner: "try"})
		switch {
		case err == nil && time.Now().Before(earliest):
			t.Errorf("TryAcquire granted token %d %v before the lock-delay ended", l.Token, earliest.Sub(time.Now()))
			mustRelease(t, c, l)
		case err == nil:
			t.Logf("TryAcquire came after the lock-delay (a slow machine): nothing tested by it")
			mustRelease(t, c, l)
		default:
			wantErr(t, "TryAcquire within the lock-delay", err, lock.ErrNotAcquired)
		}
		next, err := b.Acquire(ctx(t, caps.TTL+delay+caps.ExpirySlack+caps.GrantBound), k, lock.AcquireOptions{TTL: longTTL, Owner: "next"})
		granted := time.Now()
		if err != nil {
			t.Fatalf("not granted within TTL %v + lock-delay %v + slack: %v", caps.TTL, delay, err)
		}
		if granted.Before(earliest) {
			t.Errorf("granted %v after the crashed holder's acquire was sent, before its TTL %v + lock-delay %v (less drift)", granted.Sub(sent), caps.TTL, delay)
		}
		t.Logf("granted %v after the crashed holder's acquire was sent (TTL %v + lock-delay %v)", granted.Sub(sent), caps.TTL, delay)
		if next.Token <= crashed.Token {
			t.Errorf("token after the delay %d, want > %d", next.Token, crashed.Token)
		}
		mustRelease(t, b, next)
	})
	t.Run("AfterRelease", func(t *testing.T) {
		k := key(t, "k")
		h := mustAcquire(t, a, k, lock.AcquireOptions{TTL: longTTL, LockDelay: delay, Owner: "holder"}, time.Minute)
		mustRelease(t, a, h)
		l, err := b.TryAcquire(ctx(t, caps.GrantBound), k, lock.AcquireOptions{TTL: longTTL, Owner: "try"})
		if err != nil {
			t.Fatalf("TryAcquire right after a release of a lease with a lock-delay: %v (a release ends no delay)", err)
		}
		mustRelease(t, b, l)
		h = mustAcquire(t, a, k, lock.AcquireOptions{TTL: longTTL, LockDelay: delay, Owner: "holder"}, time.Minute)
		waiter := acquireAsync(ctx(t, time.Minute), b, k, lock.AcquireOptions{TTL: longTTL, Owner: "waiter"})
		s.awaitWaiters(t, a, k, 1)
		mustRelease(t, a, h)
		select {
		case r := <-waiter:
			if r.err != nil {
				t.Fatalf("waiter: %v", r.err)
			}
			mustRelease(t, b, r.lease)
		case <-time.After(delay / 2):
			t.Fatalf("waiter not granted within %v of the release of a lease with lock-delay %v (a release ends no delay)", delay/2, delay)
		}
	})
}
