package raftlock

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// TestMembership: a fourth node joins through a follower (forwarded to the
// leader), leadership is transferred, a node is removed; locks keep working
// and every member reports the same peers and leader.
func TestMembership(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := l.Acquire(ctx, "before", lock.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}

	f := followers(c, l)[0]
	cfg := DefaultConfig("4")
	fastConfig(t)(&cfg)
	cfg.DataDir = t.TempDir()
	s4, err := StartServer(ctx, cfg, []string{f.APIAddr()})
	if err != nil {
		t.Fatalf("joining through follower %s: %v", f.ID(), err)
	}
	t.Cleanup(func() { s4.Shutdown() })
	c.Servers = append(c.Servers, s4)
	pl := awaitPeers(t, f.APIAddr(), []string{"1", "2", "3", "4"})
	if pl.APIAddress["4"] != s4.APIAddr() {
		t.Errorf("member directory has %q for node 4, want %q", pl.APIAddress["4"], s4.APIAddr())
	}

	// Transfer leadership; the lock survives and the new leader grants.
	if err := l.Raft().LeadershipTransfer().Error(); err != nil {
		t.Fatalf("leadership transfer: %v", err)
	}
	nl, err := WaitLeader(ctx, followers(c, l)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("leadership moved from %s to %s", l.ID(), nl.ID())
	if info, err := nl.Inspect(ctx, "before"); err != nil || info.Token != held.Token {
		t.Fatalf("after transfer Inspect = %+v, %v", info, err)
	}

	// Remove the old leader through another member's address.
	var via *Node
	for _, n := range c.Nodes() {
		if n != l && n != nl {
			via = n
			break
		}
	}
	if _, err := Remove(ctx, []string{via.APIAddr()}, l.ID()); err != nil {
		t.Fatalf("removing node %s via node %s: %v", l.ID(), via.ID(), err)
	}
	var want []string
	for _, id := range []string{"1", "2", "3", "4"} {
		if id != l.ID() {
			want = append(want, id)
		}
	}
	pl = awaitPeers(t, nl.APIAddr(), want)
	if pl.LeaderID != nl.ID() || pl.LeaderAddr != nl.APIAddr() {
		t.Errorf("peer list names leader %s at %s, want %s at %s", pl.LeaderID, pl.LeaderAddr, nl.ID(), nl.APIAddr())
	}
	if _, ok := pl.APIAddress[l.ID()]; ok {
		t.Errorf("removed node %s is still in the member directory", l.ID())
	}
	if lease, err := nl.Acquire(ctx, "after", lock.AcquireOptions{TTL: time.Minute}); err != nil || lease.Token <= held.Token {
		t.Fatalf("acquire after membership changes: %+v, %v", lease, err)
	}
	// A follower redirects lock calls to the leader.
	var follower *Node
	for _, n := range c.Nodes() {
		if n != l && n != nl {
			follower = n
		}
	}
	_, err = follower.TryAcquire(ctx, "x", lock.AcquireOptions{TTL: time.Minute})
	var redirect *lock.NotLeaderError
	if !errors.As(err, &redirect) || redirect.LeaderAddr != nl.APIAddr() {
		t.Errorf("follower TryAcquire: %v, want a redirect to %s", err, nl.APIAddr())
	}
}

// awaitPeers polls addr's peer list until its voters are want, a leader is
// known, and the member directory has the API address of each voter.
func awaitPeers(t *testing.T, addr string, want []string) *PeerList {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		pl, err := FetchPeers(ctx, addr)
		cancel()
		if err == nil {
			got := slices.Clone(pl.Voters)
			slices.Sort(got)
			known := len(pl.APIAddress) == len(want)
			for _, id := range want {
				known = known && pl.APIAddress[id] != ""
			}
			if slices.Equal(got, want) && pl.LeaderID != "" && known {
				return pl
			}
			err = fmt.Errorf("voters %v, leader %q, directory %v", got, pl.LeaderID, pl.APIAddress)
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer list at %s never showed voters %v: %v", addr, want, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
