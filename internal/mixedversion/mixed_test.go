package mixedversion

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// aboveFormat1 are the features that need a format above 1: what a
// cluster with a pre-gate voter must not offer.
const aboveFormat1 = lock.FeatureSessions | lock.FeatureShared | lock.FeatureSemaphore | lock.FeatureMultiKey

// TestMixedBinaryCluster runs nodes 1 and 2 on today's binary beside node 3
// on the binary before the format gate (a rolling upgrade stopped half
// way): (a) while node 3 is a voter the gate stays at format 1, and
// neither the nodes' Lockgate-Features nor an SDK client offer sessions,
// shared locks, semaphores or AcquireAll, which are refused as
// unsupported; (b) a lease taken with the SDK's default options (per-lease
// renewal, as sessions are not offered) lives on, renewed, while node 3
// leads, and the key stays held for everyone else; (d) node 3 on today's
// binary, on the same data directory, raises the gate to format 3 and
// sessions are offered and used; (c) over the whole test no fencing token
// was granted twice.
func TestMixedBinaryCluster(t *testing.T) {
	t.Parallel() // both wait on processes far more than they compute
	old := oldLockgate(t)
	cur := newLockgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	c, err := servers.StartRaftlock(ctx, old, 3, servers.RaftlockOptions{Log: t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var tokens []lock.Token // every grant's, in the order granted
	grant := func(what string, lease *lock.Lease) {
		t.Logf("%s: token %d", what, lease.Token)
		tokens = append(tokens, lease.Token)
	}
	probe := func(what string) { // one grant and release through a fresh client
		t.Helper()
		cl := newClient(t, c.APIAddrs)
		lease, err := cl.Acquire(ctx, "probe/"+what, lock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			t.Fatalf("probe %s: %v", what, err)
		}
		grant("probe "+what, lease)
		if err := cl.Release(ctx, lease); err != nil {
			t.Fatalf("probe %s: release: %v", what, err)
		}
	}
	probe("old")

	// Node 2 first, restarted with its --join as compose restarts a
	// member: its join goes through node 1, of the old binary, which
	// refuses the join's format field; the node joins without it.
	if err := c.Nodes[1].RestartJoining(cur); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitCaughtUp(ctx, c.Nodes[1], 30*time.Second); err != nil {
		t.Fatal(err)
	}
	replace(t, ctx, c, c.Nodes[0], cur)
	n1, n3 := c.Nodes[0], c.Nodes[2]
	// A node of today's binary leads: the binary before the gate knows no
	// gate and offers what it reads itself.
	lead(t, ctx, c, func(id string) bool { return id != n3.ID }, grant)
	probe("mixed")

	// (a) The voters' formats as the leader asks them: node 3 predates
	// the gate (no formats in its status: format 1).
	poll(t, "every voter's format known", 20*time.Second, func() error {
		st, err := formatStatus(n1)
		if err != nil {
			return err
		}
		reads := map[string]uint8{}
		for _, v := range st.Voters {
			reads[v.ID] = v.Reads
		}
		if want := map[string]uint8{"1": fsm.MaxFormat, "2": fsm.MaxFormat, "3": 1}; !maps.Equal(reads, want) {
			return fmt.Errorf("voters read %v, want %v", reads, want)
		}
		return nil
	})
	// The gate must not rise while node 3 is a voter: watched over more
	// than two of the leader's polls of the voters (time that must pass
	// for a wrong rise to happen).
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
		requireGate(t, c, fsm.DefaultGate)
	}
	for _, nd := range c.Nodes[:2] {
		if f := headerFeatures(t, nd); f&aboveFormat1 != 0 {
			t.Errorf("node %s announces %s in %s with a format-1 voter", nd.ID, f&aboveFormat1, wire.FeaturesHeader)
		}
	}
	cl := newClient(t, []string{n1.APIAddr})
	if f := cl.Features(); f&aboveFormat1 != 0 {
		t.Errorf("an SDK client is offered %s with a format-1 voter", f&aboveFormat1)
	}
	refused := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, lock.ErrUnsupported) {
			t.Errorf("%s with a format-1 voter: %v, want unsupported", what, err)
		}
	}
	_, err = cl.Acquire(ctx, "prim/shared", lock.AcquireOptions{TTL: 5 * time.Second, Mode: lock.ModeShared})
	refused("a shared lock", err)
	_, err = cl.Acquire(ctx, "prim/sem", lock.AcquireOptions{TTL: 5 * time.Second, Mode: lock.ModeShared, Permits: 2})
	refused("a semaphore permit", err)
	_, err = cl.AcquireAll(ctx, []string{"prim/a", "prim/b"}, lock.AcquireOptions{TTL: 5 * time.Second})
	refused("AcquireAll", err)
	_, err = cl.OpenSession(ctx, lock.SessionOptions{})
	refused("a session", err)

	// (b) Client 1 takes k with the SDK's defaults: it would open a
	// session if offered; here its lease is renewed on its own.
	// Its one endpoint is node 3, which lead() below never pauses: a
	// client that reconnected to a node held in SIGSTOP would wait out
	// its dial and request timeouts (5 s and 10 s), and the lease's 20 s
	// could run out across two rounds of leadership steering (seen once
	// in eight runs), which says nothing about the upgrade.
	c1 := newClient(t, []string{n3.APIAddr})
	lease1, err := c1.Acquire(ctx, "k", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant("client 1 k", lease1)
	if lease1.Session() != nil {
		t.Errorf("client 1's lease is in a session, which the cluster does not offer")
	}
	alive := func(when string) {
		t.Helper()
		if err := lease1.Err(); err != nil {
			t.Fatalf("client 1's lease of k was lost %s: %v", when, err)
		}
	}
	lead(t, ctx, c, func(id string) bool { return id == n3.ID }, grant)
	alive("once node 3 led")
	requireGate(t, c, fsm.DefaultGate)
	c2 := newClient(t, c.APIAddrs)
	if l, err := c2.TryAcquire(ctx, "k", lock.AcquireOptions{}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("client 2's TryAcquire of k under node 3: lease %v, err %v; want held by client 1", l, err)
	}
	// The old leader renews client 1's lease: its deadline moves on.
	before := lease1.Deadline()
	poll(t, "client 1's lease renewed by node 3", 20*time.Second, func() error {
		alive("while node 3 led")
		if !lease1.Deadline().After(before) {
			return fmt.Errorf("deadline still %v", before)
		}
		return nil
	})
	if l := c.Leader(); l == nil || l.ID != n3.ID {
		t.Fatalf("leader %v during the renewal, want node 3 throughout", l)
	}
	probe("node-3-leads")

	// (d) Node 3 on today's binary, on its data directory: every voter
	// reads format 3, and the gate rises.
	replace(t, ctx, c, n3, cur)
	poll(t, "the gate at format 3 on every node", 30*time.Second, func() error {
		for _, nd := range c.Nodes {
			st, err := formatStatus(nd)
			if err != nil {
				return fmt.Errorf("node %s: %w", nd.ID, err)
			}
			if want := (fsm.Gate{Format: fsm.MaxFormat, Offer: fsm.MaxFormat}); st.Gate != want {
				return fmt.Errorf("node %s: gate %s, want %s", nd.ID, st.Gate, want)
			}
		}
		return nil
	})
	for _, nd := range c.Nodes {
		if f := headerFeatures(t, nd); !f.Has(aboveFormat1) {
			t.Errorf("node %s announces %s once every voter reads format 3, want %s too", nd.ID, f, aboveFormat1)
		}
	}
	c3 := newClient(t, c.APIAddrs)
	if f := c3.Features(); !f.Has(aboveFormat1) {
		t.Errorf("a new SDK client is offered %s at format 3, want %s too", f, aboveFormat1)
	}
	lease3, err := c3.Acquire(ctx, "s", lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	grant("client 3 s", lease3)
	if lease3.Session() == nil {
		t.Errorf("client 3's default acquire at format 3 is not in a session")
	}
	alive("through node 3's replacement")
	if l, err := c2.TryAcquire(ctx, "k", lock.AcquireOptions{}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Fatalf("client 2's TryAcquire of k at format 3: lease %v, err %v; want held by client 1", l, err)
	}
	alive("before its release")
	if err := c1.Release(ctx, lease1); err != nil {
		t.Fatalf("client 1's release of k: %v", err)
	}
	lease2, err := c2.TryAcquire(ctx, "k", lock.AcquireOptions{})
	if err != nil {
		t.Fatalf("client 2's TryAcquire of k once released: %v", err)
	}
	grant("client 2 k", lease2)

	// (c) One counter for every key: each grant's token above all before.
	for i := 1; i < len(tokens); i++ {
		if tokens[i] <= tokens[i-1] {
			t.Errorf("token %d granted after token %d: tokens %v", tokens[i], tokens[i-1], tokens)
		}
	}
	for _, nd := range c.Nodes {
		if nd.PID() == 0 {
			t.Errorf("node %s is not running: %s", nd.ID, nd.ExitStatus())
		}
	}
}

// replace restarts nd on bin (same data directory and addresses) and
// waits until it has caught up with the leader.
func replace(t *testing.T, ctx context.Context, c *servers.Raftlock, nd *servers.RaftNode, bin string) {
	t.Helper()
	if err := nd.RestartWith(bin); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitCaughtUp(ctx, nd, 30*time.Second); err != nil {
		t.Fatal(err)
	}
}

// lead moves the leadership until a node that ok accepts leads, the
// leader read from GET /v1/cluster/peers. Each round stops the leader
// with SIGTERM, which hands leadership to its most up-to-date follower
// (the first in configuration order on a tie): the nodes ok refuses are
// paused (SIGSTOP) meanwhile and an entry is committed without them, so
// that the follower ahead is one ok accepts. The stopped node is started
// again, caught up, before the next round.
func lead(t *testing.T, ctx context.Context, c *servers.Raftlock, ok func(id string) bool, grant func(string, *lock.Lease)) {
	t.Helper()
	for round := 0; ; round++ {
		var l *servers.RaftNode
		poll(t, "a leader", 20*time.Second, func() error {
			if l = c.Leader(); l == nil {
				return errors.New("no node knows a leader")
			}
			return nil
		})
		if ok(l.ID) {
			t.Logf("node %s leads", l.ID)
			return
		}
		if round == 5 {
			t.Fatalf("node %s still leads after %d rounds", l.ID, round)
		}
		var paused []*servers.RaftNode
		for _, nd := range c.Nodes {
			if nd != l && !ok(nd.ID) {
				if err := nd.Pause(); err != nil {
					t.Fatal(err)
				}
				paused = append(paused, nd)
			}
		}
		if len(paused) > 0 {
			cl := newClient(t, []string{l.APIAddr})
			lease, err := cl.Acquire(ctx, "lead/entry", lock.AcquireOptions{TTL: 5 * time.Second})
			if err == nil {
				grant("an entry without the paused nodes", lease)
				err = cl.Release(ctx, lease)
			}
			cl.Close()
			if err != nil {
				t.Errorf("an entry without node(s) %v: %v", ids(paused), err)
			}
		}
		t.Logf("node %s leads: stopping it (paused: %v)", l.ID, ids(paused))
		l.Stop()
		for _, nd := range paused {
			if err := nd.Resume(); err != nil {
				t.Fatal(err)
			}
		}
		poll(t, "another leader", 20*time.Second, func() error {
			for _, nd := range c.Nodes {
				if nd == l {
					continue
				}
				if id, err := nd.LeaderID(); err == nil && id != "" && id != l.ID {
					return nil
				}
			}
			return fmt.Errorf("no node but %s knows a leader", l.ID)
		})
		// Without --join, as a member restarts: a node of today's
		// binary would send a join request that the old binary refuses.
		replace(t, ctx, c, l, l.Binary())
	}
}

func ids(nodes []*servers.RaftNode) []string {
	var out []string
	for _, nd := range nodes {
		out = append(out, nd.ID)
	}
	return out
}

// requireGate fails the test unless every running node of today's binary
// reports gate want.
func requireGate(t *testing.T, c *servers.Raftlock, want fsm.Gate) {
	t.Helper()
	for _, nd := range c.Nodes {
		st, err := formatStatus(nd)
		if err != nil {
			continue // the old binary has no format endpoint
		}
		if st.Gate != want {
			t.Fatalf("node %s: gate %s, want %s", nd.ID, st.Gate, want)
		}
	}
}

// headerFeatures reads what nd announces in its Lockgate-Features header.
func headerFeatures(t *testing.T, nd *servers.RaftNode) lock.Features {
	t.Helper()
	resp, err := http.Get("http://" + nd.APIAddr + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	f, _ := lock.ParseFeatures(strings.Split(resp.Header.Get(wire.FeaturesHeader), ","))
	return f
}

func newClient(t *testing.T, endpoints []string) *client.Client {
	t.Helper()
	cl, err := client.New(endpoints, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cl.Close() })
	return cl
}
