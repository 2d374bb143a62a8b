package peers

import (
	"context"
	"errors"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// The checks every wrapper's tests run against real servers.

func bg(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// eventually retries f until it returns true or d passes: for server-side
// state with no notification to wait on (a waiter queued); the pause only
// paces the checks.
func eventually(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// checkExclusion has every locker acquire key rounds times from its own
// goroutine and update a counter under the lock with a separate load and
// store: a second holder shows as a concurrent holder or a lost update. It
// returns the tokens in grant order.
func checkExclusion(t *testing.T, lockers []lock.Locker, key string, rounds int, opts lock.AcquireOptions) []lock.Token {
	t.Helper()
	var (
		inside  atomic.Int32
		counter atomic.Int64
		mu      sync.Mutex
		tokens  []lock.Token
		wg      sync.WaitGroup
	)
	ctx := bg(t, 60*time.Second)
	for i, l := range lockers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				lease, err := l.Acquire(ctx, key, opts)
				if err != nil {
					t.Errorf("locker %d round %d: Acquire: %v", i, r, err)
					return
				}
				if n := inside.Add(1); n != 1 {
					t.Errorf("locker %d round %d: %d holders at once", i, r, n)
				}
				mu.Lock()
				tokens = append(tokens, lease.Token)
				mu.Unlock()
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				inside.Add(-1)
				if err := l.Release(ctx, lease); err != nil {
					t.Errorf("locker %d round %d: Release: %v", i, r, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if want := int64(len(lockers) * rounds); counter.Load() != want {
		t.Errorf("counter = %d after %d critical sections: updates were lost", counter.Load(), want)
	}
	return tokens
}

// checkIncreasing fails unless tokens strictly increase.
func checkIncreasing(t *testing.T, tokens []lock.Token) {
	t.Helper()
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Fatalf("token %d of grant %d is not above %d of the grant before (tokens %v)", tokens[i], i, tokens[i-1], tokens)
		}
	}
}

// checkTryHeld: TryAcquire of a key another Locker holds fails with
// ErrNotAcquired; once released, it succeeds.
func checkTryHeld(t *testing.T, a, b lock.Locker, key string) {
	t.Helper()
	ctx := bg(t, 20*time.Second)
	held, err := a.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if l, err := b.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire of a held key: lease %v, err %v; want ErrNotAcquired", l, err)
	}
	if l, err := a.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("TryAcquire by the holder's own Locker: lease %v, err %v; want ErrNotAcquired", l, err)
	}
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	l, err := b.TryAcquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("TryAcquire of a released key: %v", err)
	}
	if err := b.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// checkReleaseTwice: the second Release of a lease is ErrNotHeld, and
// the lease's Done is closed after the first.
func checkReleaseTwice(t *testing.T, l lock.Locker, key string) {
	t.Helper()
	ctx := bg(t, 20*time.Second)
	lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, lease); err != nil {
		t.Fatalf("first Release: %v", err)
	}
	select {
	case <-lease.Done():
	default:
		t.Fatal("Done is open after Release")
	}
	if err := l.Release(ctx, lease); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("second Release: %v, want ErrNotHeld", err)
	}
	if err := l.Renew(ctx, lease, 0); !errors.Is(err, lock.ErrNotHeld) {
		t.Fatalf("Renew after Release: %v, want ErrNotHeld", err)
	}
}

// checkCancel: an Acquire waiting behind a holder returns an error
// matching its context's when the context ends, and leaves nothing
// behind: once the holder releases, a third Locker acquires the key.
// queued, if not nil, reports that the waiter is queued at the server:
// the waiter's context is cancelled once it is. Without it (a library
// whose waiters leave no trace at the server) the waiter's context has a
// 300 ms deadline instead.
func checkCancel(t *testing.T, holder, waiter, other lock.Locker, key string, queued func() bool) {
	t.Helper()
	ctx := bg(t, 30*time.Second)
	held, err := holder.Acquire(ctx, key, lock.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	want := context.Canceled
	if queued == nil {
		wctx, cancel = context.WithTimeout(ctx, 300*time.Millisecond)
		defer cancel()
		want = context.DeadlineExceeded
	}
	got := make(chan error, 1)
	go func() {
		l, err := waiter.Acquire(wctx, key, lock.AcquireOptions{TTL: 20 * time.Second})
		if l != nil {
			err = errors.New("granted while the key was held")
		}
		got <- err
	}()
	if queued != nil {
		eventually(t, 10*time.Second, "the waiter is queued", queued)
		cancel()
	}
	if err := <-got; !errors.Is(err, want) {
		t.Fatalf("Acquire whose context ended: %v, want %v", err, want)
	}
	if err := holder.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	l, err := other.Acquire(ctx, key, lock.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatalf("Acquire after the cancelled waiter and the release: %v", err)
	}
	if err := other.Release(ctx, l); err != nil {
		t.Fatal(err)
	}
}

// waiters returns a check that Inspect of key through l reports n waiters.
func waiters(l lock.Locker, key string, n int) func() bool {
	return func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		info, err := l.Inspect(ctx, key)
		return err == nil && info.Waiters == n
	}
}

// checkFIFO: with A holding the key, B queued and then C queued (each
// through its own Locker, each awaited at the server with Inspect), B is
// granted before C once A releases.
func checkFIFO(t *testing.T, a, b, c lock.Locker, key string) {
	t.Helper()
	ctx := bg(t, 30*time.Second)
	held, err := a.Acquire(ctx, key, lock.AcquireOptions{TTL: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	type grant struct {
		who   string
		l     lock.Locker
		lease *lock.Lease
		err   error
	}
	grants := make(chan grant, 2)
	wait := func(who string, l lock.Locker) {
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: 20 * time.Second})
		grants <- grant{who, l, lease, err}
	}
	go wait("B", b)
	eventually(t, 10*time.Second, "B is queued", waiters(a, key, 1))
	go wait("C", c)
	eventually(t, 10*time.Second, "C is queued", waiters(a, key, 2))
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"B", "C"} {
		g := <-grants
		if g.err != nil {
			t.Fatalf("%s: %v", g.who, g.err)
		}
		if g.who != want {
			t.Fatalf("%s was granted first, though B queued before C", g.who)
		}
		if err := g.l.Release(ctx, g.lease); err != nil {
			t.Fatal(err)
		}
	}
}

// checkClosed: every call after Close is ErrClosed, and Close is
// idempotent.
func checkClosed(t *testing.T, l lock.Locker, key string) {
	t.Helper()
	ctx := bg(t, 10*time.Second)
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if _, err := l.Acquire(ctx, key, lock.AcquireOptions{}); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("Acquire after Close: %v, want ErrClosed", err)
	}
	if _, err := l.TryAcquire(ctx, key, lock.AcquireOptions{}); !errors.Is(err, lock.ErrClosed) {
		t.Fatalf("TryAcquire after Close: %v, want ErrClosed", err)
	}
}

// checkPolling runs the checks of a wrapper whose library has no fencing
// token, no server-side queue and no way to name a holder (the Redis
// locks): exclusion with every lease carrying Token 0, TryAcquire of a
// held key, a second Release, a cancelled waiter (polling leaves no trace
// at the server), Inspect's ErrUnsupported, and the calls after Close.
func checkPolling[L lock.Locker](t *testing.T, lib string, open func(*testing.T) L) {
	t.Run("Exclusion", func(t *testing.T) {
		a, b, c := open(t), open(t), open(t)
		tokens := checkExclusion(t, []lock.Locker{a, a, b, c}, "excl", 8, lock.AcquireOptions{TTL: 5 * time.Second})
		for _, tok := range tokens {
			if tok != 0 {
				t.Fatalf("token %d: %s has no fencing token, leases must carry 0", tok, lib)
			}
		}
	})
	t.Run("TryAcquireHeld", func(t *testing.T) { checkTryHeld(t, open(t), open(t), "try") })
	t.Run("ReleaseTwice", func(t *testing.T) { checkReleaseTwice(t, open(t), "twice") })
	t.Run("Cancel", func(t *testing.T) { checkCancel(t, open(t), open(t), open(t), "cancel", nil) })
	t.Run("Inspect", func(t *testing.T) {
		if _, err := open(t).Inspect(context.Background(), "k"); !errors.Is(err, ErrUnsupported) {
			t.Fatalf("Inspect: %v, want ErrUnsupported", err)
		}
	})
	t.Run("Closed", func(t *testing.T) { checkClosed(t, open(t), "closed") })
}
