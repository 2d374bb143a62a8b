package clients_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/election"
)

// The primitives' scenarios: shared locks, semaphores, acquire-all, watch,
// lock-delay and election, as the Go runner implements them (the
// TypeScript and Python runners mirror each step).
func init() {
	goScenarios["shared-readers"] = sharedReaders
	goScenarios["semaphore-permits"] = semaphorePermits
	goScenarios["acquire-all"] = acquireAll
	goScenarios["watch"] = watchScenario
	goScenarios["lock-delay"] = lockDelay
	goScenarios["election"] = electionScenario
}

// allFeatures are what a raftlock gateway announces besides "wanted" (the
// TypeScript and Python runners see "wanted" too: the Go SDK's Features
// are the lock's, lock.Features, which has no wanted).
var allFeatures = []string{"shared", "semaphore", "multikey", "watch", "lockdelay", "sessions", "watchprefix"}

// shared-readers: the gateway announces every feature; A and B hold the
// key shared at once (inspect: mode shared, holders A then B); C's
// exclusive try is held, C's exclusive acquire waits until both have
// released, and is then granted with a token above both.
func sharedReaders(ctx context.Context, r *goRun, s scenario) error {
	a, b, c := r.client("A"), r.client("B"), r.client("C")
	if got := a.Features().Names(); !slices.Equal(got, allFeatures) {
		return fmt.Errorf("features %v, want %v", got, allFeatures)
	}
	shared := lock.AcquireOptions{TTL: ttlOf(s), Mode: lock.ModeShared}
	la, err := a.Acquire(ctx, r.key, shared)
	if err != nil {
		return fmt.Errorf("A shared acquire: %w", err)
	}
	lb, err := b.TryAcquire(ctx, r.key, shared)
	if err != nil {
		return fmt.Errorf("B shared try-acquire beside A: %w", err)
	}
	if la.Mode != lock.ModeShared || lb.Mode != lock.ModeShared || lb.Token <= la.Token {
		return fmt.Errorf("leases A %v/%d, B %v/%d: want shared, B's token above A's", la.Mode, la.Token, lb.Mode, lb.Token)
	}
	info, err := c.Inspect(ctx, r.key)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if info.Mode != lock.ModeShared || len(info.Holders) != 2 || info.Holders[0].Token != la.Token || info.Holders[1].Token != lb.Token {
		return fmt.Errorf("inspect %+v: want mode shared, holders A (%d) then B (%d)", info, la.Token, lb.Token)
	}
	var held *lock.HeldError
	if l, err := c.TryAcquire(ctx, r.key, lock.AcquireOptions{TTL: ttlOf(s)}); !errors.As(err, &held) {
		return fmt.Errorf("C's exclusive try-acquire beside two readers: %+v, %v; want held", l, err)
	}
	cch := acquireAsync(ctx, c, r.key, lock.AcquireOptions{TTL: ttlOf(s)})
	if err := waiters(ctx, a, r.key, 1); err != nil {
		return err
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	select {
	case got := <-cch:
		return fmt.Errorf("C's exclusive acquire answered while B still reads: %+v", got)
	default:
	}
	if err := holds(ctx, c, lb); err != nil {
		return fmt.Errorf("after A's release B should be the only holder: %w", err)
	}
	if err := b.Release(ctx, lb); err != nil {
		return fmt.Errorf("B release: %w", err)
	}
	got, err := await(cch, 10*time.Second, "C's exclusive acquire after both releases")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("C acquire: %w", got.err)
	}
	if got.lease.Mode != lock.ModeExclusive || got.lease.Token <= lb.Token {
		return fmt.Errorf("C's lease %v token %d: want exclusive above %d", got.lease.Mode, got.lease.Token, lb.Token)
	}
	return c.Release(ctx, got.lease)
}

// semaphore-permits: with 2 permits A and B hold at once; C's try with 2
// is held, with 3 is permits_mismatch; C's acquire with 2 waits until A
// releases and is then granted.
func semaphorePermits(ctx context.Context, r *goRun, s scenario) error {
	a, b, c := r.client("A"), r.client("B"), r.client("C")
	sem := lock.AcquireOptions{TTL: ttlOf(s), Permits: 2}
	la, err := a.Acquire(ctx, r.key, sem)
	if err != nil {
		return fmt.Errorf("A permit: %w", err)
	}
	lb, err := b.Acquire(ctx, r.key, sem)
	if err != nil {
		return fmt.Errorf("B permit: %w", err)
	}
	if la.Permits != 2 || lb.Permits != 2 || la.Mode != lock.ModeShared {
		return fmt.Errorf("permits A %d (%v), B %d: want 2, shared", la.Permits, la.Mode, lb.Permits)
	}
	info, err := c.Inspect(ctx, r.key)
	if err != nil {
		return fmt.Errorf("inspect: %w", err)
	}
	if info.Permits != 2 || len(info.Holders) != 2 {
		return fmt.Errorf("inspect %+v: want permits 2 with 2 holders", info)
	}
	var held *lock.HeldError
	if l, err := c.TryAcquire(ctx, r.key, sem); !errors.As(err, &held) {
		return fmt.Errorf("C's third permit: %+v, %v; want held", l, err)
	}
	if l, err := c.TryAcquire(ctx, r.key, lock.AcquireOptions{TTL: ttlOf(s), Permits: 3}); !errors.Is(err, lock.ErrPermitsMismatch) {
		return fmt.Errorf("C with 3 permits on a semaphore of 2: %+v, %v; want permits_mismatch", l, err)
	}
	cch := acquireAsync(ctx, c, r.key, sem)
	if err := waiters(ctx, a, r.key, 1); err != nil {
		return err
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	got, err := await(cch, 10*time.Second, "C's permit after A's release")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("C permit: %w", got.err)
	}
	if got.lease.Permits != 2 || got.lease.Token <= lb.Token {
		return fmt.Errorf("C's permit: %d permits, token %d; want 2, above %d", got.lease.Permits, got.lease.Token, lb.Token)
	}
	if err := b.Release(ctx, lb); err != nil {
		return err
	}
	if err := c.Release(ctx, got.lease); err != nil {
		return err
	}
	return free(ctx, a, r.key)
}

// acquire-all: with k2 held by A, B's try of [k1, k2, k3] is held and
// leaves k1 and k3 free; B's acquire of them waits, and when A releases it
// gets three leases in the order of the keys, k2's token above A's; B's
// release of them frees all three.
func acquireAll(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	keys := []string{r.key + "/1", r.key + "/2", r.key + "/3"}
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, keys[1], opts)
	if err != nil {
		return fmt.Errorf("A acquire %s: %w", keys[1], err)
	}
	var held *lock.HeldError
	if ls, err := b.TryAcquireAll(ctx, keys, opts); !errors.As(err, &held) {
		return fmt.Errorf("B's try of %v with one held: %v, %v; want held", keys, ls, err)
	}
	for _, k := range []string{keys[0], keys[2]} {
		if err := free(ctx, a, k); err != nil {
			return fmt.Errorf("after a failed try-acquire-all: %w", err)
		}
	}
	type all struct {
		leases []*lock.Lease
		err    error
	}
	bch := make(chan all, 1)
	go func() {
		ls, err := b.AcquireAll(ctx, keys, opts)
		bch <- all{ls, err}
	}()
	if err := waiters(ctx, a, keys[1], 1); err != nil {
		return err
	}
	select {
	case got := <-bch:
		return fmt.Errorf("B's acquire-all answered while A holds %s: %+v", keys[1], got)
	default:
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	got, err := await(bch, 10*time.Second, "B's acquire-all after A's release")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("B acquire-all: %w", got.err)
	}
	if len(got.leases) != len(keys) {
		return fmt.Errorf("B got %d leases for %d keys", len(got.leases), len(keys))
	}
	for i, l := range got.leases {
		if l.Key != keys[i] || l.Token == 0 {
			return fmt.Errorf("lease %d: key %q token %d; want %q with a token", i, l.Key, l.Token, keys[i])
		}
		if err := holds(ctx, a, l); err != nil {
			return err
		}
	}
	if got.leases[1].Token <= la.Token {
		return fmt.Errorf("B's token for %s is %d, not above A's %d", keys[1], got.leases[1].Token, la.Token)
	}
	for _, l := range got.leases {
		if err := b.Release(ctx, l); err != nil {
			return fmt.Errorf("B release %s: %w", l.Key, err)
		}
	}
	for _, k := range keys {
		if err := free(ctx, a, k); err != nil {
			return err
		}
	}
	return nil
}

// nextEvent is the next event of a watch, or an error after 10 s.
func nextEvent(ctx context.Context, ch <-chan lock.Event) (lock.Event, error) {
	ev, ok, err := receive(ctx, ch, "no event within 10s")
	switch {
	case err != nil:
		return lock.Event{}, err
	case !ok:
		return lock.Event{}, errors.New("the watch ended")
	case ev.Type == lock.EventError:
		return ev, fmt.Errorf("the watch broke: %w", ev.Err)
	}
	return ev, nil
}

// receive is the next value of ch (ok false: ch is closed), or the error
// timeout after 10 s, or ctx's error when it ends first.
func receive[T any](ctx context.Context, ch <-chan T, timeout string) (v T, ok bool, err error) {
	select {
	case v, ok = <-ch:
		return v, ok, nil
	case <-time.After(10 * time.Second):
		return v, false, errors.New(timeout)
	case <-ctx.Done():
		return v, false, ctx.Err()
	}
}

// watch: a watch of a free key is synced at once; then A's grant (with
// its owner, token and value), A's release, and a lease of ttlMs that is
// not renewed: granted, then expired, each with the lease's token and
// revisions that increase. A second watch opened while A holds starts with
// A as holder, then synced.
func watchScenario(ctx context.Context, r *goRun, s scenario) error {
	a, w := r.client("A"), r.client("W")
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	events, err := w.Watch(wctx, r.key)
	if err != nil {
		return fmt.Errorf("watch: %w", err)
	}
	var seen []string
	want := func(typ lock.EventType, token lock.Token, owner, value string) (lock.Event, error) {
		ev, err := nextEvent(ctx, events)
		if err != nil {
			return ev, fmt.Errorf("after %v: %w", seen, err)
		}
		seen = append(seen, ev.Type.String())
		if ev.Type != typ || ev.Token != token || (owner != "" && ev.Owner != owner) || (value != "" && string(ev.Value) != value) || ev.Key != r.key {
			return ev, fmt.Errorf("after %v: event %v %q token %d owner %q value %q; want %v token %d owner %q value %q",
				seen[:len(seen)-1], ev.Type, ev.Key, ev.Token, ev.Owner, ev.Value, typ, token, owner, value)
		}
		return ev, nil
	}
	if _, err := want(lock.EventSynced, 0, "", ""); err != nil {
		return err
	}
	la, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: 10 * time.Second, Value: []byte("v1")})
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	g, err := want(lock.EventGranted, la.Token, la.Owner, "v1")
	if err != nil {
		return err
	}
	// A second watch while A holds: holder A, then synced.
	second, err := w.Watch(wctx, r.key)
	if err != nil {
		return fmt.Errorf("second watch: %w", err)
	}
	if ev, err := nextEvent(ctx, second); err != nil || ev.Type != lock.EventHolder || ev.Token != la.Token || ev.Owner != la.Owner {
		return fmt.Errorf("second watch's first event %+v, %v: want holder A token %d", ev, err, la.Token)
	}
	if ev, err := nextEvent(ctx, second); err != nil || ev.Type != lock.EventSynced {
		return fmt.Errorf("second watch's second event %+v, %v: want synced", ev, err)
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	rel, err := want(lock.EventReleased, la.Token, "", "")
	if err != nil {
		return err
	}
	ttl := ttlOf(s)
	lx, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttl})
	if err != nil {
		return fmt.Errorf("A acquire of %v: %w", ttl, err)
	}
	g2, err := want(lock.EventGranted, lx.Token, lx.Owner, "")
	if err != nil {
		return err
	}
	ex, err := want(lock.EventExpired, lx.Token, "", "")
	if err != nil {
		return err
	}
	if !(g.Revision < rel.Revision && rel.Revision < g2.Revision && g2.Revision < ex.Revision) {
		return fmt.Errorf("revisions %d, %d, %d, %d: want increasing", g.Revision, rel.Revision, g2.Revision, ex.Revision)
	}
	return free(ctx, a, r.key)
}

// lock-delay: a lease of ttlMs with a lock-delay of 1500 ms that is not
// renewed expires; then B's try is delayed (not held) with a retry-in of
// at most the delay, and B's waiting acquire is granted once the delay
// has run.
func lockDelay(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	const delay = 1500 * time.Millisecond
	la, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttlOf(s), LockDelay: delay})
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	select {
	case <-la.Done():
	case <-ctx.Done():
		return ctx.Err()
	}
	if err := pollUntil(ctx, "A's lease to expire on the server", func() (bool, error) {
		_, err := b.Inspect(ctx, r.key)
		return errors.Is(err, lock.ErrNotFound), err
	}); err != nil {
		return err
	}
	freed := time.Now()
	var delayed *lock.DelayedError
	l, err := b.TryAcquire(ctx, r.key, lock.AcquireOptions{TTL: 10 * time.Second})
	if !errors.As(err, &delayed) {
		return fmt.Errorf("B's try within the lock-delay: %+v, %v; want delayed", l, err)
	}
	if left := time.Until(delayed.Until); left <= 0 || left > delay {
		return fmt.Errorf("delayed for another %v: want within (0, %v]", left, delay)
	}
	lb, err := b.Acquire(ctx, r.key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("B's waiting acquire: %w", err)
	}
	if since := time.Since(freed); since > delay+5*time.Second {
		return fmt.Errorf("B granted %v after the key was freed: want about the delay %v", since, delay)
	}
	if lb.Token <= la.Token {
		return fmt.Errorf("B's token %d not above A's %d", lb.Token, la.Token)
	}
	return b.Release(ctx, lb)
}

// nextLeader is the next leader Observe reports, or an error after 10 s.
func nextLeader(ctx context.Context, ch <-chan election.Leader) (election.Leader, error) {
	ld, ok, err := receive(ctx, ch, "no leader reported within 10s")
	if err == nil && !ok {
		err = errors.New("observe ended")
	}
	return ld, err
}

// election: Current and Observe report nobody, then A once it campaigned
// (value "a", its token); B's campaign waits; A's resignation is reported
// as none then B (value "b", a higher token); B's resignation as none, and
// Current says nobody leads.
func electionScenario(ctx context.Context, r *goRun, s scenario) error {
	a, b, o := r.client("A"), r.client("B"), r.client("O")
	if cur, err := election.Current(ctx, o, r.key); err != nil || cur.Present {
		return fmt.Errorf("current before any campaign: %+v, %v; want nobody", cur, err)
	}
	octx, cancel := context.WithCancel(ctx)
	defer cancel()
	leaders, err := election.Observe(octx, o, r.key)
	if err != nil {
		return fmt.Errorf("observe: %w", err)
	}
	var seen []string
	expect := func(present bool, token lock.Token, value string) error {
		ld, err := nextLeader(ctx, leaders)
		if err != nil {
			return fmt.Errorf("after %v: %w", seen, err)
		}
		seen = append(seen, fmt.Sprintf("%v/%d/%s", ld.Present, ld.Token, ld.Value))
		if ld.Present != present || (present && (ld.Token != token || string(ld.Value) != value)) {
			return fmt.Errorf("leaders %v: the last want present %v token %d value %q", seen, present, token, value)
		}
		return nil
	}
	if err := expect(false, 0, ""); err != nil {
		return err
	}
	ea, err := election.Campaign(ctx, a, r.key, []byte("a"), election.WithTTL(ttlOf(s)))
	if err != nil {
		return fmt.Errorf("A campaign: %w", err)
	}
	if err := expect(true, ea.Token(), "a"); err != nil {
		return err
	}
	if cur, err := election.Current(ctx, o, r.key); err != nil || !cur.Present || cur.Token != ea.Token() || string(cur.Value) != "a" {
		return fmt.Errorf("current while A leads: %+v, %v", cur, err)
	}
	type won struct {
		e   *election.Leadership
		err error
	}
	bch := make(chan won, 1)
	go func() {
		e, err := election.Campaign(ctx, b, r.key, []byte("b"), election.WithTTL(ttlOf(s)))
		bch <- won{e, err}
	}()
	if err := waiters(ctx, o, r.key, 1); err != nil {
		return err
	}
	if err := ea.Resign(ctx); err != nil {
		return fmt.Errorf("A resign: %w", err)
	}
	wb, err := await(bch, 10*time.Second, "B's campaign after A's resignation")
	if err != nil {
		return err
	}
	if wb.err != nil {
		return fmt.Errorf("B campaign: %w", wb.err)
	}
	if wb.e.Token() <= ea.Token() {
		return fmt.Errorf("B's term %d not above A's %d", wb.e.Token(), ea.Token())
	}
	if err := expect(false, 0, ""); err != nil {
		return err
	}
	if err := expect(true, wb.e.Token(), "b"); err != nil {
		return err
	}
	if err := wb.e.Resign(ctx); err != nil {
		return fmt.Errorf("B resign: %w", err)
	}
	if err := expect(false, 0, ""); err != nil {
		return err
	}
	if cur, err := election.Current(ctx, o, r.key); err != nil || cur.Present {
		return fmt.Errorf("current after both resigned: %+v, %v; want nobody", cur, err)
	}
	return nil
}
