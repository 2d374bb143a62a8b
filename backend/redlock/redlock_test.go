package redlock

import (
	"context"
	"errors"
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   Config
		field string
	}{
		{Config{}, "Addrs"},
		{Config{Addrs: []string{"a:1", ""}}, "Addrs[1]"},
		{Config{Addrs: []string{"a:1", "a:1"}}, "Addrs[1]"},
		{Config{Addrs: []string{"a:1"}, NodeTimeout: -1}, "NodeTimeout"},
		{Config{Addrs: []string{"a:1"}, DriftFactor: 0.7}, "DriftFactor"},
		{Config{Addrs: []string{"a:1"}, PoolSize: -2}, "PoolSize"},
		{Config{Addrs: []string{"a:1"}, ClientID: strings.Repeat("x", 200)}, "ClientID"},
	} {
		err := tc.cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), "Config."+tc.field) {
			t.Errorf("Validate(%+v) = %v, want an error naming Config.%s", tc.cfg, err, tc.field)
		}
		if _, err := New(tc.cfg); err == nil {
			t.Errorf("New(%+v) accepted an invalid config", tc.cfg)
		}
	}
	if err := DefaultConfig("a:1", "b:2", "c:3").Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
}

// TestQuorum pauses every subset of five nodes: with at most two down an
// attempt succeeds; with three or more it fails with ErrUnavailable within a
// few node timeouts and leaves no partial lock behind once the nodes resume.
func TestQuorum(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	// Long enough that a live node always answers on a loaded CI machine:
	// under the race detector, with other packages' tests sharing the CPU,
	// a live node's reply can take tens of milliseconds, and a timeout near
	// that would count it as down.
	const nodeTimeout = 500 * time.Millisecond
	l := newLocker(t, rs, func(c *Config) { c.NodeTimeout = nodeTimeout })
	for mask := range 1 << 5 {
		down := bits.OnesCount(uint(mask))
		key := fmt.Sprintf("quorum-%02x", mask)
		for i, r := range rs {
			if mask&(1<<i) != 0 {
				r.Pause()
			}
		}
		start := time.Now()
		lease, err := l.TryAcquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: 10 * time.Second})
		took := time.Since(start)
		if down <= 2 {
			if err != nil {
				t.Errorf("%05b (%d down): TryAcquire: %v", mask, down, err)
			} else if err := l.Release(bg(t, time.Minute), lease); err != nil {
				t.Errorf("%05b: Release: %v", mask, err)
			}
		} else {
			if !errors.Is(err, lock.ErrUnavailable) {
				t.Errorf("%05b (%d down): TryAcquire = %v, %v; want ErrUnavailable", mask, down, lease, err)
			} else if !strings.Contains(err.Error(), fmt.Sprintf("only %d of 5 nodes answered", 5-down)) {
				t.Errorf("%05b: error does not say how many nodes answered: %v", mask, err)
			}
			if took > 20*nodeTimeout { // fails fast, not at the context's minute
				t.Errorf("%05b: failing took %v, want a few node timeouts", mask, took)
			}
		}
		for i, r := range rs {
			if mask&(1<<i) != 0 {
				r.Resume()
			}
		}
		if down > 2 {
			// The attempt is still queued on the paused nodes; the abort
			// (with its tombstone) must win whichever order they run in.
			deadline := time.Now().Add(3 * time.Second)
			for holders(t, rs, key) != 0 {
				if time.Now().After(deadline) {
					t.Errorf("%05b: %d nodes still hold the key after the failed attempt", mask, holders(t, rs, key))
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
	}
}

// TestValidityExceeded: an attempt that reaches its quorum only after the
// TTL (minus drift) has passed is a failure, and is undone on every node.
func TestValidityExceeded(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	l := newLocker(t, rs, func(c *Config) { c.NodeTimeout = 2 * time.Second })
	const ttl = 100 * time.Millisecond
	for _, r := range rs[:3] {
		r.Pause()
	}
	go func() {
		time.Sleep(3 * ttl / 2)
		for _, r := range rs[:3] {
			r.Resume()
		}
	}()
	lease, err := l.TryAcquire(bg(t, time.Minute), "validity", lock.AcquireOptions{TTL: ttl})
	if err == nil {
		t.Fatalf("TryAcquire succeeded after its validity passed: token %d, deadline in %v", lease.Token, time.Until(lease.Deadline()))
	}
	if !errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), "validity") {
		t.Errorf("TryAcquire: %v, want ErrUnavailable about validity", err)
	}
	awaitHolders(t, rs, "validity", 0)
}

// TestNodeReset: Redis without persistence forgets locks and fence counters
// on restart. One reset node out of five changes nothing; a quorum of reset
// nodes lets a second client in while the first believes it holds, with a
// token that is not larger (the documented caveat), and the first learns of
// it at its next renewal.
func TestNodeReset(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	a := newLocker(t, rs, nil)
	b := newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}

	t.Run("Minority", func(t *testing.T) {
		lease, err := a.TryAcquire(bg(t, time.Minute), "reset-one", opts)
		if err != nil {
			t.Fatal(err)
		}
		// The acquire returns once a majority said yes; its requests to
		// the slower nodes may still be landing (a loaded machine).
		awaitHolders(t, rs, "reset-one", 5)
		rs[0].Kill()
		rs[0].Restart()
		if n := holders(t, rs, "reset-one"); n != 4 {
			t.Errorf("%d nodes hold the key after one reset, want 4", n)
		}
		_, err = b.TryAcquire(bg(t, time.Minute), "reset-one", opts)
		var he *lock.HeldError
		if !errors.As(err, &he) || he.Token != lease.Token {
			t.Errorf("TryAcquire of a key held by 4 of 5 nodes: %v, want *HeldError with token %d", err, lease.Token)
		}
		if info, err := b.Inspect(bg(t, time.Minute), "reset-one"); err != nil || info.Token != lease.Token {
			t.Errorf("Inspect: %+v, %v", info, err)
		}
		if err := a.Renew(bg(t, time.Minute), lease, 0); err != nil {
			t.Errorf("Renew after one reset: %v", err)
		}
		if err := a.Release(bg(t, time.Minute), lease); err != nil {
			t.Errorf("Release after one reset: %v", err)
		}
		next, err := b.TryAcquire(bg(t, time.Minute), "reset-one", opts)
		if err != nil {
			t.Fatal(err)
		}
		if next.Token <= lease.Token {
			t.Errorf("token after a minority reset %d, want > %d", next.Token, lease.Token)
		}
		b.Release(bg(t, time.Minute), next)
	})

	t.Run("Majority", func(t *testing.T) {
		lease, err := a.TryAcquire(bg(t, time.Minute), "reset-three", opts)
		if err != nil {
			t.Fatal(err)
		}
		// Let the grant land on all five nodes, and any background token
		// propagation (bounded by 4 node timeouts) finish, so that nothing
		// raises a counter after the resets below.
		for holders(t, rs, "reset-three") != 5 {
			time.Sleep(10 * time.Millisecond)
		}
		time.Sleep(5 * DefaultNodeTimeout)
		for _, r := range rs[:3] {
			r.Kill()
			r.Restart()
		}
		// a still believes it holds: its deadline is a minute away.
		if lease.Err() != nil {
			t.Fatalf("lease ended by itself: %v", lease.Err())
		}
		other, err := b.TryAcquire(bg(t, time.Minute), "reset-three", opts)
		if err != nil {
			t.Fatalf("TryAcquire after a majority reset: %v (pinned behaviour: it succeeds)", err)
		}
		t.Logf("first holder's token %d, second holder's token %d", lease.Token, other.Token)
		if other.Token > lease.Token {
			t.Errorf("token %d > %d: the counters survived the reset? (pinned behaviour: they reset)", other.Token, lease.Token)
		}
		err = a.Renew(bg(t, time.Minute), lease, 0)
		if !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("first holder's Renew after the takeover: %v, want ErrNotHeld", err)
		}
		select {
		case <-lease.Done():
		default:
			t.Errorf("first holder's Done not closed after a refused renewal")
		}
		if err := b.Release(bg(t, time.Minute), other); err != nil {
			t.Errorf("Release: %v", err)
		}
	})
}

// TestStaleScripts: a stale handle, or the current handle with an older
// token, can neither extend nor delete the current holder's lock.
func TestStaleScripts(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	l := newLocker(t, rs, nil)
	opts := lock.AcquireOptions{TTL: time.Minute}
	old, err := l.TryAcquire(bg(t, time.Minute), "stale", opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Release(bg(t, time.Minute), old); err != nil {
		t.Fatal(err)
	}
	cur, err := l.TryAcquire(bg(t, time.Minute), "stale", opts)
	if err != nil {
		t.Fatal(err)
	}
	rebuild := func(handle string, token lock.Token) *lock.Lease {
		return kit.NewLease(kit.Grant{Key: "stale", Handle: handle, Token: token, TTL: time.Minute, Sent: time.Now()})
	}
	// The nodes the grant reached: a quorum, all three unless one answered
	// late on a loaded machine (a grant needs two). The stale calls below
	// must leave each of them holding the key, its TTL unshortened.
	holding := map[string]bool{}
	for _, r := range rs {
		pttl, err := raw(t, r).PTTL(bg(t, time.Minute), DefaultPrefix+":lock:{stale}").Result()
		holding[r.Addr] = err == nil && pttl > 0
	}
	if before := holders(t, rs, "stale"); before < 2 {
		t.Fatalf("%d nodes hold the key after its grant, want a quorum of 2", before)
	}
	for _, stale := range []*lock.Lease{
		rebuild(old.Handle, old.Token),
		rebuild(old.Handle, cur.Token),
		rebuild(cur.Handle, cur.Token-1),
		rebuild(lock.NewHandle(), cur.Token+5),
	} {
		if err := l.Renew(bg(t, time.Minute), stale, time.Second); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Renew(handle %.8s…, token %d): %v, want ErrNotHeld", stale.Handle, stale.Token, err)
		}
		if err := l.Release(bg(t, time.Minute), rebuild(stale.Handle, stale.Token)); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("Release(handle %.8s…, token %d): %v, want ErrNotHeld", stale.Handle, stale.Token, err)
		}
	}
	for _, r := range rs {
		if !holding[r.Addr] {
			continue
		}
		pttl, err := raw(t, r).PTTL(bg(t, time.Minute), DefaultPrefix+":lock:{stale}").Result()
		if err != nil || pttl < 50*time.Second {
			t.Errorf("PTTL on %s = %v, %v: a stale renewal shortened the lock", r.Addr, pttl, err)
		}
	}
	if info, err := l.Inspect(bg(t, time.Minute), "stale"); err != nil || info.Token != cur.Token {
		t.Errorf("Inspect: %+v, %v; want token %d", info, err, cur.Token)
	}
	if err := l.Release(bg(t, time.Minute), cur); err != nil {
		t.Errorf("Release of the current lease: %v", err)
	}
}

// TestTokensAcrossQuorums: per-node counters that diverge (seeded here as
// 5, 9, 3, 0, 0) and grants by different quorums still give strictly
// increasing tokens, because each grant raises the counters of the nodes
// it reaches to its token.
func TestTokensAcrossQuorums(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	l := newLocker(t, rs, func(c *Config) { c.NodeTimeout = 200 * time.Millisecond })
	const key = "quorums"
	const ttl = time.Second // > NodeTimeout plus the drift, or no grant is valid
	for i, v := range []int{5, 9, 3, 0, 0} {
		if err := raw(t, rs[i]).Set(bg(t, time.Minute), DefaultPrefix+":fence:{"+key+"}", v, 0).Err(); err != nil {
			t.Fatal(err)
		}
	}
	// Down sets: the quorums {A,B,C} then {A,D,E} first, then
	// every pair in turn.
	downs := [][]int{{3, 4}, {1, 2}}
	for i := range 5 {
		downs = append(downs, []int{i, (i + 1) % 5}, []int{i, (i + 2) % 5})
	}
	var last lock.Token
	for round, down := range downs {
		for _, i := range down {
			rs[i].Pause()
		}
		lease, err := l.TryAcquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Fatalf("round %d (down %v): %v", round, down, err)
		}
		if lease.Token <= last {
			t.Errorf("round %d (down %v): token %d after %d", round, down, lease.Token, last)
		}
		last = lease.Token
		if round%2 == 0 {
			// Half the rounds release; the others let the lease expire.
			if err := l.Release(bg(t, time.Minute), lease); err != nil {
				t.Errorf("round %d: Release: %v", round, err)
			}
		}
		for _, i := range down {
			rs[i].Resume()
		}
		// The paused nodes run the queued acquire when they resume: wait
		// until those leftovers expire.
		deadline := time.Now().Add(3 * ttl)
		for holders(t, rs, key) != 0 && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
	}
	if last <= 10 {
		t.Errorf("final token %d: the seeded counters were ignored", last)
	}
}

// TestCancelNoGhost: a waiter cancelled while its attempt is in flight
// leaves nothing behind.
func TestWaiterWakesOnRelease(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	a := newLocker(t, rs, nil)
	b := newLocker(t, rs, nil)
	held, err := a.TryAcquire(bg(t, time.Minute), "wake", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := b.Acquire(bg(t, time.Minute), "wake", lock.AcquireOptions{TTL: time.Minute})
		if err == nil {
			err = b.Release(context.Background(), lease)
		}
		got <- err
	}()
	time.Sleep(100 * time.Millisecond)
	start := time.Now()
	if err := a.Release(bg(t, time.Minute), held); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(start); d > 200*time.Millisecond {
			t.Errorf("waiter in another Locker took %v after the release", d)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("waiter in another Locker not woken by the release message")
	}
}

// TestIdempotentHandle: a re-sent acquire with the same caller-chosen
// handle returns the same grant instead of waiting behind it.
func TestIdempotentHandle(t *testing.T) {
	rs := testenv.StartRedisN(t, 3)
	l := newLocker(t, rs, nil)
	other := newLocker(t, rs, nil)
	h := lock.NewHandle()
	opts := lock.AcquireOptions{TTL: time.Minute, Handle: h, Owner: "me"}
	first, err := l.Acquire(bg(t, time.Minute), "idem", opts)
	if err != nil {
		t.Fatal(err)
	}
	again, err := other.Acquire(bg(t, 5*time.Second), "idem", opts)
	if err != nil {
		t.Fatalf("re-sent acquire: %v", err)
	}
	if again.Token != first.Token || again.Handle != h {
		t.Errorf("re-sent acquire: token %d handle %.8s…, want token %d handle %.8s…", again.Token, again.Handle, first.Token, h)
	}
	if _, err := other.TryAcquire(bg(t, time.Minute), "idem", lock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire with another handle: %v, want ErrNotAcquired", err)
	}
	if err := l.Release(bg(t, time.Minute), again); err != nil {
		t.Errorf("Release: %v", err)
	}
	if err := l.Release(bg(t, time.Minute), first); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second Release of the same grant: %v, want ErrNotHeld", err)
	}
}

// TestInspectUnavailable: Inspect and Release need a quorum of answers.
func TestInspectUnavailable(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	l := newLocker(t, rs, func(c *Config) { c.NodeTimeout = 500 * time.Millisecond })
	lease, err := l.TryAcquire(bg(t, time.Minute), "inspect", lock.AcquireOptions{TTL: time.Minute, Owner: "o", Value: []byte("v")})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs[:2] {
		r.Kill()
	}
	info, err := l.Inspect(bg(t, time.Minute), "inspect")
	if err != nil || info.Owner != "o" || string(info.Value) != "v" || info.Token != lease.Token || info.Waiters != -1 {
		t.Errorf("Inspect with 2 of 5 down: %+v, %v", info, err)
	}
	rs[2].Kill()
	if _, err := l.Inspect(bg(t, time.Minute), "inspect"); !errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), "only 2 of 5 nodes answered") {
		t.Errorf("Inspect with 3 of 5 down: %v, want ErrUnavailable naming 2 of 5", err)
	}
	if err := l.Release(bg(t, time.Minute), lease); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("Release with 3 of 5 down: %v, want ErrUnavailable", err)
	}
	for _, r := range rs[:3] {
		r.Restart()
	}
}

// TestInspectLateGrantToken: two nodes that granted late, with counters
// an earlier aborted attempt had raised, hold larger node-local tokens
// than the grant's until the propagation records the grant's; Inspect
// still reports the grant's token, not the largest node-local token (which
// would be a late node's).
//
// The test fakes the late nodes' larger tokens on nodes 3 and 4 after the
// grant, so every node must have granted (run acquire.lua) first: the
// Locker answers at a quorum and collects the other nodes' answers in the
// background (propagate), so right after TryAcquire a node may not hold
// the key yet. Had it not, Inspect would see the grant's token on only two
// nodes beside the two faked ones — a state no grant can produce (its
// quorum's three nodes all hold a token no larger than the grant's) — and
// rightly report the third smallest, a faked one. Closing the granting
// Locker awaits that background collection; another Locker inspects.
func TestInspectLateGrantToken(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	l := newLocker(t, rs, nil)
	const key = "late-grant"
	lease, err := l.TryAcquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil { // waits for every node's answer to the grant
		t.Fatal(err)
	}
	if n := holders(t, rs, key); n != len(rs) {
		t.Fatalf("%d of %d nodes granted, want all: the late tokens below are faked on granting nodes", n, len(rs))
	}
	meta := DefaultPrefix + ":meta:{" + key + "}"
	for _, r := range rs[3:] {
		if err := raw(t, r).HSet(bg(t, time.Minute), meta, "token", uint64(lease.Token)+1, "final", "0").Err(); err != nil {
			t.Fatal(err)
		}
	}
	info, err := newLocker(t, rs, nil).Inspect(bg(t, time.Minute), key)
	if err != nil {
		t.Fatal(err)
	}
	if info.Token != lease.Token {
		t.Errorf("Inspect reports token %d, want the grant's %d", info.Token, lease.Token)
	}
}

// TestErrorsNameEveryNode: an operation that misses its quorum reports the
// error of every node that failed, each naming the node's index and
// address, so that an operator sees which nodes are down (not only the
// first one to fail).
func TestErrorsNameEveryNode(t *testing.T) {
	rs := testenv.StartRedisN(t, 5)
	l := newLocker(t, rs, func(c *Config) { c.NodeTimeout = 500 * time.Millisecond })
	lease, err := l.TryAcquire(bg(t, time.Minute), "every-node", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range rs[:3] {
		r.Kill()
	}
	_, acqErr := l.TryAcquire(bg(t, time.Minute), "every-node-2", lock.AcquireOptions{TTL: time.Minute})
	_, inspErr := l.Inspect(bg(t, time.Minute), "every-node")
	relErr := l.Release(bg(t, time.Minute), lease)
	renErr := l.Renew(bg(t, time.Minute), lease, time.Minute)
	for _, c := range []struct {
		op  string
		err error
	}{{"TryAcquire", acqErr}, {"Inspect", inspErr}, {"Release", relErr}, {"Renew", renErr}} {
		if !errors.Is(c.err, lock.ErrUnavailable) {
			t.Errorf("%s with 3 of 5 down: %v, want ErrUnavailable", c.op, c.err)
			continue
		}
		for i, r := range rs[:3] {
			if want := fmt.Sprintf("node %d (%s)", i, r.Addr); !strings.Contains(c.err.Error(), want) {
				t.Errorf("%s: error does not name %q: %v", c.op, want, c.err)
			}
		}
	}
	for _, r := range rs[:3] {
		r.Restart()
	}
}
