package client_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// TestRedirectToLeader: a client that knows only a follower ends up
// connected to the leader after one not_leader hop, and is granted there.
func TestRedirectToLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster")
	}
	c := startRaft(t)
	l := raftLeader(t, c)
	for _, s := range c.Servers {
		if s.Node == l {
			continue
		}
		t.Run("via-"+s.ID(), func(t *testing.T) {
			// One hop must do: a follower names the leader directly.
			sdk := newClient(t, []string{s.APIAddr()}, client.Options{MaxHops: 1})
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			lease, err := sdk.TryAcquire(ctx, "redirect-"+s.ID(), lock.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("TryAcquire through follower %s: %v", s.ID(), err)
			}
			if got := sdk.Endpoint(); got != l.APIAddr() {
				t.Errorf("connected to %q after the redirect, want the leader %s", got, l.APIAddr())
			}
			if info, err := sdk.Inspect(ctx, lease.Key); err != nil || info.Token != lease.Token {
				t.Errorf("Inspect = %+v, %v; want token %d", info, err, lease.Token)
			}
			if err := sdk.Release(ctx, lease); err != nil {
				t.Fatalf("Release: %v", err)
			}
		})
	}
}

// TestNoQuorum: with two of three nodes stopped nobody can grant. A
// one-shot call gives up within its deadline with an error matching
// lock.ErrUnavailable; a waiting Acquire keeps trying until its context
// ends and returns the context's error.
func TestNoQuorum(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster")
	}
	c := startRaft(t)
	l := raftLeader(t, c)
	var survivor *raftlock.Server
	for _, s := range c.Servers {
		if s.Node != l && survivor == nil {
			survivor = s
			continue
		}
		s.Shutdown()
	}
	sdk := newClient(t, []string{survivor.APIAddr()}, client.Options{RequestTimeout: time.Second})
	start := time.Now()
	_, err := sdk.TryAcquire(context.Background(), "no-quorum", lock.AcquireOptions{TTL: time.Minute})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("TryAcquire without quorum: %v, want an error matching lock.ErrUnavailable", err)
	}
	t.Logf("TryAcquire without quorum after %v: %v", time.Since(start), err)
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("TryAcquire without quorum took %v; RequestTimeout is 1s", d)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	_, err = sdk.Acquire(ctx, "no-quorum", lock.AcquireOptions{TTL: time.Minute})
	t.Logf("Acquire without quorum: %v", err)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire without quorum: %v, want an error matching context.DeadlineExceeded", err)
	}
}

// TestLeaderFailover: SDK clients spread over a three-node raftlock cluster
// hold locks (auto-renewed) and wait for them; the leader's server stops.
// The clients find the new leader by themselves: holders keep their leases
// and tokens, every waiter is granted in turn, and no caller sees an error.
func TestLeaderFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster")
	}
	c := startRaft(t)
	old := raftLeader(t, c)
	addrs := apiAddrs(c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const (
		keys    = 3
		waiters = 4 // per key
		// Long enough that a holder's auto-renewal finds the new leader
		// before its deadline on a loaded 2-core machine (an election takes
		// 1–3 s there), short enough to check that the holders keep their
		// locks for more than a TTL after the takeover.
		ttl = 8 * time.Second
	)
	errs := make(chan error, keys*(waiters+2))
	holders := make([]*lock.Lease, keys)
	holderClients := make([]*client.Client, keys)
	for k := range keys {
		holderClients[k] = newClient(t, addrs, client.Options{})
		lease, err := holderClients[k].Acquire(ctx, fmt.Sprintf("failover-%d", k), lock.AcquireOptions{TTL: ttl, AutoRenew: true, Owner: "holder"})
		if err != nil {
			t.Fatalf("holder %d: %v", k, err)
		}
		holders[k] = lease
	}
	type grant struct {
		key   int
		token lock.Token
	}
	grants := make(chan grant, keys*waiters)
	var wg sync.WaitGroup
	for k := range keys {
		for w := range waiters {
			sdk := newClient(t, addrs, client.Options{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				lease, err := sdk.Acquire(ctx, fmt.Sprintf("failover-%d", k), lock.AcquireOptions{TTL: ttl, AutoRenew: true, Owner: fmt.Sprintf("waiter-%d-%d", k, w)})
				if err != nil {
					errs <- fmt.Errorf("waiter %d/%d: Acquire: %w", k, w, err)
					return
				}
				grants <- grant{k, lease.Token}
				time.Sleep(20 * time.Millisecond) // hold it briefly
				if err := lease.Err(); err != nil {
					errs <- fmt.Errorf("waiter %d/%d: lease ended while held: %w", k, w, err)
				}
				if err := sdk.Release(ctx, lease); err != nil {
					errs <- fmt.Errorf("waiter %d/%d: Release: %w", k, w, err)
				}
			}()
		}
	}
	probe := newClient(t, []string{old.APIAddr()}, client.Options{})
	for k := range keys {
		awaitWaiters(t, probe, fmt.Sprintf("failover-%d", k), waiters)
	}

	stopped := time.Now()
	for _, s := range c.Servers {
		if s.Node == old {
			s.Shutdown()
		}
	}
	rest := apiAddrs(c)
	var others []string
	for _, a := range rest {
		if a != old.APIAddr() {
			others = append(others, a)
		}
	}
	nl := raftLeaderOf(t, c, old)
	t.Logf("new leader %s ready %v after the old one stopped", nl.ID(), time.Since(stopped))

	// Holders keep their locks, through auto-renewal on the new leader,
	// for more than a TTL after the takeover.
	time.Sleep(ttl + ttl/2)
	probe2 := newClient(t, others, client.Options{})
	for k, h := range holders {
		if err := h.Err(); err != nil {
			t.Fatalf("holder %d lost its lease across the failover: %v", k, err)
		}
		info, err := probe2.Inspect(ctx, h.Key)
		if err != nil || info.Token != h.Token || info.Owner != "holder" {
			t.Fatalf("Inspect(%s) after the failover = %+v, %v; want the holder's token %d", h.Key, info, err, h.Token)
		}
		if err := holderClients[k].Release(ctx, h); err != nil {
			t.Fatalf("holder %d: Release after the failover: %v", k, err)
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	close(grants)
	last := map[int]lock.Token{}
	n := 0
	for g := range grants {
		n++
		if g.token <= holders[g.key].Token || g.token <= last[g.key] {
			t.Errorf("key %d: token %d not above the holder's %d and the previous grant's %d", g.key, g.token, holders[g.key].Token, last[g.key])
		}
		last[g.key] = g.token
	}
	if n != keys*waiters {
		t.Errorf("%d grants, want %d", n, keys*waiters)
	}
	// Every client that was connected to the old leader moved off it.
	for k, hc := range holderClients {
		if hc.Endpoint() == old.APIAddr() {
			t.Errorf("holder client %d still connected to the stopped leader", k)
		}
	}
}

// raftLeaderOf waits for a ready leader other than old that every running
// node knows.
func raftLeaderOf(t testing.TB, c *raftlock.LocalCluster, old *raftlock.Node) *raftlock.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var rest []*raftlock.Node
	for _, n := range c.Nodes() {
		if n != old {
			rest = append(rest, n)
		}
	}
	l, err := raftlock.WaitLeader(ctx, rest...)
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// awaitWaiters waits until Inspect reports n waiters on key.
func awaitWaiters(t testing.TB, l lock.Locker, key string, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		info, err := l.Inspect(ctx, key)
		cancel()
		if err == nil && info.Waiters >= n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("Inspect(%q) never reported %d waiters (last %+v, %v)", key, n, info, err)
		}
		if err != nil && !errors.Is(err, lock.ErrNotFound) {
			t.Logf("Inspect(%q): %v", key, err)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
