package client_test

import (
	"context"
	"errors"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// TestLeaderlessEndpointLeft: a leader whose followers are gone steps down
// and then answers every request not_leader naming no leader, for as long
// as it stays cut off. A client connected to it must not keep asking it:
// after a few such answers it moves to its other endpoint, a working
// gateway, and is served there within a bound.
func TestLeaderlessEndpointLeft(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster")
	}
	c := startRaft(t)
	l := raftLeader(t, c)
	for _, s := range c.Servers {
		if s.Node != l {
			s.Shutdown()
		}
	}
	awaitLeaderless(t, l)
	bad := l.APIAddr()
	good := startMemGateway(t, locktest.NewMemStore())

	// The good gateway refuses connections until the client has dialled the
	// cut-off node, so that the request is first sent there whichever
	// endpoint the client picks first.
	var dialledBad atomic.Bool
	var d net.Dialer
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		if addr == good && !dialledBad.Load() {
			return nil, &net.OpError{Op: "dial", Net: network, Err: syscall.ECONNREFUSED}
		}
		conn, err := d.DialContext(ctx, network, addr)
		if addr == bad && err == nil {
			dialledBad.Store(true)
		}
		return conn, err
	}
	sdk := newClient(t, []string{bad, good}, client.Options{NetDial: dial, RequestTimeout: 20 * time.Second})

	// Within the bound: three answers backed off from 50 ms (at most 350 ms
	// in all), a reconnect and one round trip, with room for a busy machine.
	const bound = 8 * time.Second
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	lease, err := sdk.TryAcquire(ctx, "leaderless", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		var nl *lock.NotLeaderError
		t.Fatalf("TryAcquire with the first endpoint leaderless: %v (not_leader: %v) after %v; want a grant from the second endpoint",
			err, errors.As(err, &nl), time.Since(start))
	}
	t.Logf("granted after %v", time.Since(start))
	if !dialledBad.Load() {
		t.Fatal("the client never connected to the leaderless node: the test proved nothing")
	}
	if got := sdk.Endpoint(); got != good {
		t.Errorf("connected to %q after the grant, want the working gateway %s", got, good)
	}
	if err := sdk.Release(ctx, lease); err != nil {
		t.Errorf("Release: %v", err)
	}
}

// awaitLeaderless waits until n, cut off from its peers, has stepped down
// and knows no leader: from then on it answers not_leader with an empty
// leader (before, its writes fail unavailable, which is not what the test
// is about). hashicorp/raft offers no event for it, hence the polling.
func awaitLeaderless(t testing.TB, n *raftlock.Node) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		if id, _ := n.Leader(); id == "" && !n.IsLeader() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("node %s still leads or names a leader 20 s after losing its peers", n.ID())
		}
		time.Sleep(10 * time.Millisecond)
	}
}
