package raftlock

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// followers returns the nodes of c other than l.
func followers(c *LocalCluster, l *Node) []*Node {
	var fs []*Node
	for _, n := range c.Nodes() {
		if n != l {
			fs = append(fs, n)
		}
	}
	return fs
}

// TestLeaderStoppedHard: the leader stops while locks are held and callers
// wait. Holders keep their locks and tokens under the new leader, a lease
// that nobody renews still expires (within one TTL of the takeover), and the
// waiters, re-sent to the new leader, are granted.
func TestLeaderStoppedHard(t *testing.T) {
	c := startCluster(t, 3)
	old := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const ttl = 2 * time.Second

	renewed, err := old.Acquire(ctx, "renewed", lock.AcquireOptions{TTL: ttl, Owner: "renewer"})
	if err != nil {
		t.Fatal(err)
	}
	abandoned, err := old.Acquire(ctx, "abandoned", lock.AcquireOptions{TTL: ttl, Owner: "crashed-client"})
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		_, err := old.NewSession().Acquire(ctx, "renewed", lock.AcquireOptions{TTL: ttl})
		waiter <- err
	}()
	awaitWaiting(t, old, "renewed", 1)

	stopped := time.Now()
	for _, s := range c.Servers {
		if s.Node == old {
			s.Shutdown()
		}
	}
	// The waiter of the old leader is told to go elsewhere.
	select {
	case err := <-waiter:
		if err == nil {
			t.Fatal("a waiter of the stopped leader was granted")
		}
		if !errors.Is(err, lock.ErrNotLeader) && !errors.Is(err, lock.ErrClosed) {
			t.Errorf("waiter of the stopped leader: %v, want a not-leader redirect or ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter of the stopped leader was never answered")
	}

	nl, err := WaitLeader(ctx, followers(c, old)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("new leader %s ready %v after the old one stopped", nl.ID(), time.Since(stopped))
	s := nl.NewSession()
	// The holder that keeps renewing keeps its lock and token.
	if err := s.Renew(ctx, renewed, ttl); err != nil {
		t.Fatalf("renewing through the new leader: %v", err)
	}
	if info, err := s.Inspect(ctx, "renewed"); err != nil || info.Token != renewed.Token || info.Owner != "renewer" {
		t.Fatalf("Inspect(renewed) on the new leader = %+v, %v; want token %d", info, err, renewed.Token)
	}
	// The re-sent waiter is granted once the holder releases.
	resent := make(chan *lock.Lease, 1)
	go func() {
		l, err := s.Acquire(ctx, "renewed", lock.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Errorf("re-sent waiter: %v", err)
		}
		resent <- l
	}()
	awaitWaiting(t, nl, "renewed", 1)
	if err := s.Release(ctx, renewed); err != nil {
		t.Fatalf("releasing through the new leader: %v", err)
	}
	if l := <-resent; l == nil || l.Token <= renewed.Token {
		t.Fatalf("re-sent waiter got %+v, want a token above %d", l, renewed.Token)
	}
	// The abandoned lease expires under the new leader, within one TTL of
	// its takeover (leases are extended by their TTL at each election).
	next, err := s.Acquire(ctx, "abandoned", lock.AcquireOptions{TTL: ttl})
	if err != nil {
		t.Fatalf("acquiring the abandoned key: %v", err)
	}
	granted := time.Now()
	if granted.Before(abandoned.Deadline()) {
		t.Errorf("abandoned key re-granted at %v, before its holder's deadline %v", granted, abandoned.Deadline())
	}
	if bound := stopped.Add(ttl + 5*time.Second); granted.After(bound) {
		t.Errorf("abandoned key re-granted %v after the leader stopped, want within TTL + election", granted.Sub(stopped))
	}
	if next.Token <= abandoned.Token {
		t.Errorf("token after failover %d, want > %d", next.Token, abandoned.Token)
	}
}

// awaitWaiting waits until n's queue for key holds want waiters.
func awaitWaiting(t *testing.T, n *Node, key string, want int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n.sched.mu.Lock()
		got := 0
		if q := n.sched.queues[key]; q != nil {
			got = len(q.waiters)
		}
		n.sched.mu.Unlock()
		if got >= want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d waiters queued for %q on node %s, want %d", got, key, n.ID(), want)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestForceRelease: an operator frees a key held by a dead client; the next
// waiter is granted at once and the old holder's renewal is refused.
func TestForceRelease(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dead, err := l.Acquire(ctx, "stuck", lock.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	next := make(chan *lock.Lease, 1)
	go func() {
		lease, err := l.NewSession().Acquire(ctx, "stuck", lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Error(err)
		}
		next <- lease
	}()
	awaitWaiting(t, l, "stuck", 1)
	if err := l.ForceRelease(ctx, "stuck"); err != nil {
		t.Fatal(err)
	}
	if got := <-next; got == nil || got.Token <= dead.Token {
		t.Fatalf("waiter after a forced release got %+v", got)
	}
	if err := l.Renew(ctx, dead, time.Hour); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("renewal by the force-released holder: %v, want ErrNotHeld", err)
	}
	if err := l.ForceRelease(ctx, "never-held"); !errors.Is(err, lock.ErrNotFound) {
		t.Errorf("ForceRelease of a free key: %v, want ErrNotFound", err)
	}
}

// TestIdempotentResend: an acquire re-sent with the same client-chosen
// handle (after a lost reply or a leader change) returns the grant of the
// first copy instead of waiting behind it.
func TestIdempotentResend(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := lock.NewHandle()
	first, err := l.NewSession().Acquire(ctx, "resent", lock.AcquireOptions{TTL: time.Minute, Handle: h})
	if err != nil {
		t.Fatal(err)
	}
	again, err := l.NewSession().TryAcquire(ctx, "resent", lock.AcquireOptions{TTL: time.Minute, Handle: h})
	if err != nil || again.Token != first.Token || again.Handle != h {
		t.Fatalf("re-sent acquire = %+v, %v; want token %d", again, err, first.Token)
	}
	if _, err := l.NewSession().TryAcquire(ctx, "resent", lock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("a different handle: %v, want ErrNotAcquired", err)
	}
}

// TestResendAheadOfQueue: an acquire re-sent for a grant that already
// committed (its reply lost to a leader change) is answered at once, not
// queued behind callers who wait for that very grant to end — which they
// would do until its TTL ran out.
func TestResendAheadOfQueue(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h := lock.NewHandle()
	first, err := l.NewSession().Acquire(ctx, "resent-q", lock.AcquireOptions{TTL: time.Minute, Handle: h})
	if err != nil {
		t.Fatal(err)
	}
	other := make(chan error, 1)
	octx, ocancel := context.WithCancel(ctx)
	defer ocancel()
	go func() {
		_, err := l.NewSession().Acquire(octx, "resent-q", lock.AcquireOptions{TTL: time.Minute})
		other <- err
	}()
	awaitWaiting(t, l, "resent-q", 1)
	rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
	defer rcancel()
	again, err := l.NewSession().Acquire(rctx, "resent-q", lock.AcquireOptions{TTL: time.Minute, Handle: h})
	if err != nil {
		t.Fatalf("re-sent acquire behind a waiter: %v (queued behind its own lock)", err)
	}
	if again.Token != first.Token {
		t.Errorf("re-sent acquire got token %d, want the committed grant's %d", again.Token, first.Token)
	}
	select {
	case err := <-other:
		t.Fatalf("the other waiter was answered while the key is held: %v", err)
	default:
	}
}

// TestResendRenews: the lease a re-sent acquire returns is valid, by the
// caller's reckoning, only while the leader holds it: its deadline counts
// from the re-sent request, so the re-send must extend the lock to match.
func TestResendRenews(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = 5 * time.Second // drift allowance 52 ms
	h := lock.NewHandle()
	if _, err := l.NewSession().Acquire(ctx, "resent-r", lock.AcquireOptions{TTL: ttl, Handle: h}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(300 * time.Millisecond) // the reply is "lost"; the caller re-sends later
	again, err := l.NewSession().Acquire(ctx, "resent-r", lock.AcquireOptions{TTL: ttl, Handle: h})
	if err != nil {
		t.Fatal(err)
	}
	held, ok := l.fsm.Lock("resent-r")
	if !ok {
		t.Fatal("the lock vanished")
	}
	if expires := time.Unix(0, held.Expires); expires.Before(again.Deadline().Round(0)) {
		t.Errorf("the leader expires the lock at %v, %v before the caller's deadline %v: both it and the next holder would hold it",
			expires, again.Deadline().Round(0).Sub(expires), again.Deadline().Round(0))
	}
}

// TestResentReleaseOutcome: a release re-sent after a leader change that
// finds the lock gone while the lease is live was done by the first
// attempt; without a cut-off first attempt, or past the deadline, "not
// held" stands.
func TestResentReleaseOutcome(t *testing.T) {
	live := kit.NewLease(kit.Grant{Key: "k", Token: 1, Handle: "h", TTL: time.Minute, Sent: time.Now()})
	over := kit.NewLease(kit.Grant{Key: "k", Token: 1, Handle: "h", TTL: time.Minute, Sent: time.Now().Add(-time.Hour)})
	cut := fmt.Errorf("raftlock: leadership lost while committing: %w", &lock.NotLeaderError{})
	notHeld := fmt.Errorf("gone: %w", lock.ErrNotHeld)
	for _, tc := range []struct {
		name  string
		lease *lock.Lease
		errs  []error
		want  error
	}{
		{"cut off, then gone", live, []error{cut, notHeld}, nil},
		{"gone at once", live, []error{notHeld}, lock.ErrNotHeld},
		{"cut off, then gone past the deadline", over, []error{cut, notHeld}, lock.ErrNotHeld},
		{"cut off, then released", live, []error{cut, nil}, nil},
	} {
		var r resentRelease
		var err error
		for _, e := range tc.errs {
			err = r.outcome(tc.lease, e)
		}
		if (tc.want == nil) != (err == nil) || tc.want != nil && !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
}
