package clients_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// scenarioTimeout bounds one Go scenario.
const scenarioTimeout = 60 * time.Second

// goScenarios are the Go SDK's implementations of scenarios.json's
// scenarios, by name (their meaning: /tmp/brief/v1.md, mirrored in the
// runners of clients/js and clients/python). Each returns nil or why it
// failed.
var goScenarios = map[string]func(ctx context.Context, r *goRun, s scenario) error{
	"contention-pushed-grant":     contentionPushedGrant,
	"fifo-three":                  fifoThree,
	"expiry":                      expiry,
	"renew":                       renew,
	"stale-release":               staleRelease,
	"try-acquire-held":            tryAcquireHeld,
	"wait-timeout":                waitTimeout,
	"cancel":                      cancelWait,
	"redirect-from-follower":      redirectFromFollower,
	"leader-killed-while-holding": leaderKilledWhileHolding,
	"leader-killed-while-waiting": leaderKilledWhileWaiting,
	"bad-input":                   badInput,
	"lease-cache":                 leaseCache,
}

// runGo runs the scenario set with the Go SDK, one subtest per scenario,
// and prints the runners' common line per scenario ("ok NAME 123ms" or
// "FAIL NAME: reason"). A scenario it does not implement fails.
func runGo(t *testing.T, h *harness, set scenarioSet) {
	run := lock.NewHandle()[:8]
	for _, s := range set.Scenarios {
		t.Run(s.Name, func(t *testing.T) {
			f, ok := goScenarios[s.Name]
			if !ok {
				t.Fatalf("FAIL %s: unknown scenario: the Go runner does not implement it", s.Name)
			}
			ctx, cancel := context.WithTimeout(context.Background(), scenarioTimeout)
			defer cancel()
			r := &goRun{t: t, h: h, key: fmt.Sprintf("clients/go/%s/%s", run, s.Name), run: run}
			start := time.Now()
			if err := f(ctx, r, s); err != nil {
				t.Errorf("FAIL %s: %v", s.Name, err)
				return
			}
			t.Logf("ok %s %dms", s.Name, time.Since(start).Milliseconds())
		})
	}
}

// goRun is one scenario's run: its key and its clients.
type goRun struct {
	t   *testing.T
	h   *harness
	key string
	run string
}

// client returns a Go SDK client named name of the given endpoints (every
// node's when none), closed when the scenario ends.
func (r *goRun) client(name string, endpoints ...string) *client.Client {
	r.t.Helper()
	return r.clientWith(name, client.Options{}, endpoints...)
}

// clientWith is client with options (ClientID and Logger are set here).
func (r *goRun) clientWith(name string, opts client.Options, endpoints ...string) *client.Client {
	r.t.Helper()
	if len(endpoints) == 0 {
		endpoints = r.h.rl.APIAddrs
	}
	opts.ClientID = "go-" + name + "-" + r.run
	opts.Logger = slog.New(slog.NewTextHandler(tWriter{r.t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	c, err := client.New(endpoints, opts)
	if err != nil {
		r.t.Fatalf("client.New(%v): %v", endpoints, err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// control calls the harness's control API, as the other runners do, and
// decodes its answer into out.
func (r *goRun) control(ctx context.Context, method, path string, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, r.h.control+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("control %s %s: %w", method, path, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("control %s %s: %s: %s", method, path, resp.Status, body)
	}
	return json.Unmarshal(body, out)
}

// restoreAfter restores the cluster through the control API when a
// leader-killing scenario ends, whatever its outcome; a failed restore
// fails the scenario.
func (r *goRun) restoreAfter() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var body endpointsBody
	if err := r.control(ctx, http.MethodPost, "/restore", &body); err != nil {
		r.t.Errorf("restore: %v", err)
	}
}

// acquired is the outcome of an Acquire run in the background.
type acquired struct {
	lease *lock.Lease
	err   error
	at    time.Time // when Acquire returned
}

// acquireAsync starts c.Acquire(ctx, key, opts) and delivers its outcome.
func acquireAsync(ctx context.Context, c *client.Client, key string, opts lock.AcquireOptions) <-chan acquired {
	ch := make(chan acquired, 1)
	go func() {
		l, err := c.Acquire(ctx, key, opts)
		ch <- acquired{l, err, time.Now()}
	}()
	return ch
}

// await returns the outcome of an acquireAsync (or of another call made
// in a goroutine), or an error after d.
func await[T any](ch <-chan T, d time.Duration, what string) (T, error) {
	select {
	case a := <-ch:
		return a, nil
	case <-time.After(d):
		var zero T
		return zero, fmt.Errorf("%s: no answer within %v", what, d)
	}
}

// stop wraps a reason of pollUntil's cond that no further wait can change.
type stop struct{ error }

// pollUntil calls cond every 10 ms until it reports true, or ctx ends (then
// the last reason is returned), or cond's reason is a stop.
func pollUntil(ctx context.Context, what string, cond func() (bool, error)) error {
	var last error
	for {
		ok, err := cond()
		if ok {
			return nil
		}
		if s, isStop := err.(stop); isStop {
			return fmt.Errorf("waiting for %s: %w", what, s.error)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// waiters waits until Inspect of key shows n waiters.
func waiters(ctx context.Context, c *client.Client, key string, n int) error {
	return pollUntil(ctx, fmt.Sprintf("%d waiter(s) on %q", n, key), func() (bool, error) {
		info, err := c.Inspect(ctx, key)
		if err != nil {
			return false, err
		}
		return info.Waiters == n, fmt.Errorf("%d waiters", info.Waiters)
	})
}

// free checks that nobody holds key.
func free(ctx context.Context, c *client.Client, key string) error {
	info, err := c.Inspect(ctx, key)
	if !errors.Is(err, lock.ErrNotFound) {
		return fmt.Errorf("inspect %q: want not_found, got %+v, %v", key, info, err)
	}
	return nil
}

// holds checks that Inspect of key shows lease's owner and token.
func holds(ctx context.Context, c *client.Client, lease *lock.Lease) error {
	info, err := c.Inspect(ctx, lease.Key)
	if err != nil {
		return fmt.Errorf("inspect %q: %w", lease.Key, err)
	}
	if info.Token != lease.Token || info.Owner != lease.Owner {
		return fmt.Errorf("inspect %q: owner %q token %d, want %q token %d", lease.Key, info.Owner, info.Token, lease.Owner, lease.Token)
	}
	return nil
}

func ttlOf(s scenario) time.Duration { return time.Duration(s.TTLMs) * time.Millisecond }

// contention-pushed-grant: B's waiting acquire is granted, pushed, when A
// releases, with a larger token, and not before.
func contentionPushedGrant(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	bch := acquireAsync(ctx, b, r.key, opts)
	if err := waiters(ctx, a, r.key, 1); err != nil {
		return err
	}
	select {
	case got := <-bch:
		return fmt.Errorf("B's acquire answered while A holds: %+v", got)
	default:
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	got, err := await(bch, 10*time.Second, "B's acquire after A's release")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("B acquire: %w", got.err)
	}
	if got.lease.Token <= la.Token {
		return fmt.Errorf("B's token %d is not larger than A's %d", got.lease.Token, la.Token)
	}
	return b.Release(ctx, got.lease)
}

// fifo-three: B, C and D queue behind A in that order and are granted in
// that order with increasing tokens.
func fifoThree(ctx context.Context, r *goRun, s scenario) error {
	a := r.client("A")
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	names := []string{"B", "C", "D"}
	clients := make([]*client.Client, len(names))
	chans := make([]<-chan acquired, len(names))
	for i, n := range names {
		clients[i] = r.client(n)
		chans[i] = acquireAsync(ctx, clients[i], r.key, opts)
		if err := waiters(ctx, a, r.key, i+1); err != nil {
			return fmt.Errorf("%s queued: %w", n, err)
		}
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	prev := la.Token
	for i, n := range names {
		// Only the head of the queue may be granted: the others' channels
		// must stay silent until their turn.
		got, err := await(chans[i], 10*time.Second, n+"'s acquire")
		if err != nil {
			return err
		}
		if got.err != nil {
			return fmt.Errorf("%s acquire: %w", n, got.err)
		}
		for j := i + 1; j < len(names); j++ {
			select {
			case early := <-chans[j]:
				return fmt.Errorf("%s answered before %s released: %+v", names[j], n, early)
			default:
			}
		}
		if got.lease.Token <= prev {
			return fmt.Errorf("%s's token %d is not larger than the previous %d", n, got.lease.Token, prev)
		}
		prev = got.lease.Token
		if err := clients[i].Release(ctx, got.lease); err != nil {
			return fmt.Errorf("%s release: %w", n, err)
		}
	}
	return free(ctx, a, r.key)
}

// expiry: A's lease, not renewed, ends by its deadline before B is granted,
// and B is not granted before A's TTL (less 10 %) has run.
func expiry(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	ttl := ttlOf(s)
	sent := time.Now()
	la, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttl})
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	got, err := await(acquireAsync(ctx, b, r.key, lock.AcquireOptions{TTL: 10 * time.Second}), 10*time.Second+ttl, "B's acquire")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("B acquire: %w", got.err)
	}
	if early := got.at.Sub(sent); early < ttl-ttl/10 {
		return fmt.Errorf("B granted %v after A's acquire was sent, before A's TTL %v less 10 %%", early, ttl)
	}
	if !la.Deadline().Before(got.at) {
		return fmt.Errorf("A's deadline %v is not before B's grant (%v after it)", la.Deadline(), la.Deadline().Sub(got.at))
	}
	select {
	case <-la.Done():
	case <-time.After(5 * time.Second):
		return errors.New("A's lease never reported its end")
	}
	if !errors.Is(la.Err(), lock.ErrExpired) {
		return fmt.Errorf("A's lease ended with %v, want %v", la.Err(), lock.ErrExpired)
	}
	if got.lease.Token <= la.Token {
		return fmt.Errorf("B's token %d is not larger than A's %d", got.lease.Token, la.Token)
	}
	return b.Release(ctx, got.lease)
}

// renew: an auto-renewed lease outlives four TTLs and is still held.
func renew(ctx context.Context, r *goRun, s scenario) error {
	a := r.client("A")
	ttl := ttlOf(s)
	la, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttl, AutoRenew: true})
	if err != nil {
		return fmt.Errorf("acquire: %w", err)
	}
	select {
	case <-la.Done():
		return fmt.Errorf("the lease was lost while held: %v", la.Err())
	case <-time.After(4 * ttl): // the scenario's hold, not a synchronisation
	}
	if err := holds(ctx, a, la); err != nil {
		return err
	}
	if err := la.Err(); err != nil {
		return fmt.Errorf("the lease reports %v", err)
	}
	return a.Release(ctx, la)
}

// stale-release: releasing a released lease again is not_held and does
// not free the key's next holder.
func staleRelease(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	lb, err := b.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("B acquire: %w", err)
	}
	if err := a.Release(ctx, la); !errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("A's second release: %v, want %v", err, lock.ErrNotHeld)
	}
	// A copy rebuilt from the stale grant (as after a restart) goes to the
	// server whatever the SDK remembers about the lease.
	copyA := kit.NewLease(kit.Grant{Key: la.Key, Owner: la.Owner, Token: la.Token, Handle: la.Handle, TTL: ttlOf(s), Sent: time.Now()})
	if err := a.Release(ctx, copyA); !errors.Is(err, lock.ErrNotHeld) {
		return fmt.Errorf("release of a rebuilt copy of A's lease: %v, want %v", err, lock.ErrNotHeld)
	}
	if err := holds(ctx, a, lb); err != nil {
		return fmt.Errorf("after A's stale release: %w", err)
	}
	return b.Release(ctx, lb)
}

// try-acquire-held: B's try-acquire fails with held, naming A.
func tryAcquireHeld(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	lb, err := b.TryAcquire(ctx, r.key, opts)
	var held *lock.HeldError
	if !errors.As(err, &held) {
		return fmt.Errorf("B try-acquire: %+v, %v, want a *lock.HeldError", lb, err)
	}
	if held.Owner != la.Owner || held.Token != la.Token {
		return fmt.Errorf("held names %q token %d, want A: %q token %d", held.Owner, held.Token, la.Owner, la.Token)
	}
	return a.Release(ctx, la)
}

// wait-timeout: B's acquire bounded by waitMs fails with the timeout
// error after at least waitMs, and B holds nothing afterwards. The Go SDK
// has no waitMs yet: a context deadline bounds the wait.
func waitTimeout(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	wait := time.Duration(s.WaitMs) * time.Millisecond
	wctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	start := time.Now()
	lb, err := b.Acquire(wctx, r.key, opts)
	took := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("B acquire: %+v, %v, want an error matching %v", lb, err, context.DeadlineExceeded)
	}
	if took < wait || took > wait+3*time.Second {
		return fmt.Errorf("B's acquire failed after %v, want between %v and %v", took, wait, wait+3*time.Second)
	}
	if err := waiters(ctx, a, r.key, 0); err != nil {
		return fmt.Errorf("B's wait was not withdrawn: %w", err)
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	return free(ctx, a, r.key)
}

// cancel: B's queued acquire cancelled by its context fails as cancelled
// and leaves no waiter behind.
func cancelWait(ctx context.Context, r *goRun, s scenario) error {
	a, b := r.client("A"), r.client("B")
	opts := lock.AcquireOptions{TTL: ttlOf(s)}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	bctx, cancel := context.WithCancel(ctx)
	defer cancel()
	bch := acquireAsync(bctx, b, r.key, opts)
	if err := waiters(ctx, a, r.key, 1); err != nil {
		return err
	}
	cancel()
	got, err := await(bch, 5*time.Second, "B's cancelled acquire")
	if err != nil {
		return err
	}
	if !errors.Is(got.err, context.Canceled) {
		return fmt.Errorf("B acquire: %+v, %v, want an error matching %v", got.lease, got.err, context.Canceled)
	}
	if err := waiters(ctx, a, r.key, 0); err != nil {
		return fmt.Errorf("B's wait was not withdrawn: %w", err)
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	return free(ctx, a, r.key)
}

// redirect-from-follower: a client given only a follower's address
// acquires and releases.
func redirectFromFollower(ctx context.Context, r *goRun, s scenario) error {
	var ep endpointsBody
	if err := r.control(ctx, http.MethodGet, "/endpoints", &ep); err != nil {
		return err
	}
	c := r.client("F", ep.Follower)
	l, err := c.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttlOf(s)})
	if err != nil {
		return fmt.Errorf("acquire through follower %s: %w", ep.Follower, err)
	}
	if err := holds(ctx, r.client("check"), l); err != nil {
		return err
	}
	if err := c.Release(ctx, l); err != nil {
		return fmt.Errorf("release: %w", err)
	}
	return free(ctx, c, r.key)
}

// failedOver checks through the control API that the killed node is gone
// and another leads, so that a kill that did not happen cannot pass a
// leader-killing scenario.
func (r *goRun) failedOver(ctx context.Context, killed string) error {
	var ep endpointsBody
	if err := r.control(ctx, http.MethodGet, "/endpoints", &ep); err != nil {
		return err
	}
	if ep.Leader == killed || slices.Contains(ep.Endpoints, killed) {
		return fmt.Errorf("the killed leader %s still runs: %+v", killed, ep)
	}
	return nil
}

// failoverBound is how long a lease or a wait may take to carry over to a
// new leader.
const failoverBound = 15 * time.Second

// leader-killed-while-holding: A's auto-renewed lease survives the
// leader's SIGKILL with the same token, renewed by the new leader.
func leaderKilledWhileHolding(ctx context.Context, r *goRun, s scenario) error {
	defer r.restoreAfter()
	a := r.client("A")
	ttl := ttlOf(s)
	la, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttl, AutoRenew: true})
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	var killed map[string]string
	if err := r.control(ctx, http.MethodPost, "/kill-leader", &killed); err != nil {
		return err
	}
	// A renewal sent after the kill moves the deadline past kill + ttl
	// (deadline = sent + ttl - drift): it was answered by the new leader.
	killedAt := time.Now()
	fctx, cancel := context.WithTimeout(ctx, failoverBound)
	defer cancel()
	err = pollUntil(fctx, "a renewal after the kill", func() (bool, error) {
		select {
		case <-la.Done():
			return false, stop{fmt.Errorf("the lease was lost: %w", la.Err())}
		default:
		}
		return la.Deadline().After(killedAt.Add(ttl)), fmt.Errorf("deadline %v after the kill", la.Deadline().Sub(killedAt))
	})
	if err != nil {
		return fmt.Errorf("killed %s: %w", killed["killed"], err)
	}
	if err := la.Err(); err != nil {
		return fmt.Errorf("the lease was reported lost: %w", err)
	}
	if err := holds(fctx, a, la); err != nil {
		return err
	}
	if err := r.failedOver(fctx, killed["killed"]); err != nil {
		return err
	}
	return a.Release(fctx, la)
}

// leader-killed-while-waiting: B's waiting acquire is re-sent to the new
// leader and granted when A releases there.
func leaderKilledWhileWaiting(ctx context.Context, r *goRun, s scenario) error {
	defer r.restoreAfter()
	a, b := r.client("A"), r.client("B")
	ttl := ttlOf(s)
	la, err := a.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttl, AutoRenew: true})
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	bch := acquireAsync(ctx, b, r.key, lock.AcquireOptions{TTL: ttl})
	if err := waiters(ctx, a, r.key, 1); err != nil {
		return err
	}
	var killed map[string]string
	if err := r.control(ctx, http.MethodPost, "/kill-leader", &killed); err != nil {
		return err
	}
	fctx, cancel := context.WithTimeout(ctx, failoverBound)
	defer cancel()
	if err := a.Release(fctx, la); err != nil {
		return fmt.Errorf("A release after killing %s: %w", killed["killed"], err)
	}
	got, err := await(bch, failoverBound, "B's acquire")
	if err != nil {
		return err
	}
	if got.err != nil {
		return fmt.Errorf("B acquire: %w", got.err)
	}
	if got.lease.Token <= la.Token {
		return fmt.Errorf("B's token %d is not larger than A's %d", got.lease.Token, la.Token)
	}
	if err := r.failedOver(fctx, killed["killed"]); err != nil {
		return err
	}
	return b.Release(fctx, got.lease)
}

// bad-input: an invalid key or TTL is refused with invalid_key or
// invalid_ttl, and nothing changes on the server.
func badInput(ctx context.Context, r *goRun, s scenario) error {
	c := r.client("A")
	bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for _, tc := range []struct {
		what string
		key  string
		ttl  time.Duration
		want error
	}{
		{"empty key", "", time.Second, lock.ErrInvalidKey},
		{"key of 1025 bytes", strings.Repeat("k", 1025), time.Second, lock.ErrInvalidKey},
		{"ttl 5ms", r.key, 5 * time.Millisecond, lock.ErrInvalidTTL},
	} {
		l, err := c.Acquire(bctx, tc.key, lock.AcquireOptions{TTL: tc.ttl})
		if !errors.Is(err, tc.want) {
			return fmt.Errorf("acquire with %s: %+v, %v, want %v", tc.what, l, err, tc.want)
		}
		l, err = c.TryAcquire(bctx, tc.key, lock.AcquireOptions{TTL: tc.ttl})
		if !errors.Is(err, tc.want) {
			return fmt.Errorf("try-acquire with %s: %+v, %v, want %v", tc.what, l, err, tc.want)
		}
	}
	return free(bctx, c, r.key)
}

// lease-cache: a released lease stays with A's cache (still held on the
// server), comes back with the same token without a round trip, and is
// reclaimed the moment B waits for the key.
func leaseCache(ctx context.Context, r *goRun, s scenario) error {
	a := r.clientWith("A", client.Options{CacheLeases: true})
	b := r.client("B")
	opts := lock.AcquireOptions{TTL: ttlOf(s), AutoRenew: true}
	la, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire: %w", err)
	}
	if err := a.Release(ctx, la); err != nil {
		return fmt.Errorf("A release: %w", err)
	}
	if err := holds(ctx, b, la); err != nil {
		return fmt.Errorf("after A's release the cache should keep the lease: %w", err)
	}
	again, err := a.Acquire(ctx, r.key, opts)
	if err != nil {
		return fmt.Errorf("A acquire again: %w", err)
	}
	if again.Token != la.Token || a.CacheStats().Hits != 1 {
		return fmt.Errorf("A's second acquire: token %d (first %d), stats %+v; want the cached lease", again.Token, la.Token, a.CacheStats())
	}
	if err := a.Release(ctx, again); err != nil {
		return fmt.Errorf("A release again: %w", err)
	}
	lb, err := b.Acquire(ctx, r.key, lock.AcquireOptions{TTL: ttlOf(s)})
	if err != nil {
		return fmt.Errorf("B acquire: %w", err)
	}
	if lb.Token <= la.Token {
		return fmt.Errorf("B's token %d, want > %d", lb.Token, la.Token)
	}
	select {
	case <-la.Done():
	case <-ctx.Done():
		return fmt.Errorf("A's reclaimed lease never ended: %w", ctx.Err())
	}
	if st := a.CacheStats(); st.Reclaimed != 1 {
		return fmt.Errorf("A's stats %+v, want 1 reclaimed", st)
	}
	return b.Release(ctx, lb)
}
