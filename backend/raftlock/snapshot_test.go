package raftlock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
)

// TestSnapshot100k: with 100k held locks and the log compacted into a
// snapshot, a joining node is brought up to date from the snapshot, takes
// over leadership, and serves the locks it restored: their tokens, and
// expiry tracking rebuilt from the restored table.
func TestSnapshot100k(t *testing.T) {
	const n = 100_000
	compact := func(cfg *Config) {
		cfg.TrailingLogs = 16 // compact aggressively so the joiner needs the snapshot
		cfg.SnapshotThreshold = 1 << 30
		// raft-wal truncates whole segments only: entries below its first
		// index stay readable in the tail segment, and the leader would
		// replay them to the joiner instead of sending the snapshot. Bolt
		// deletes them, so the snapshot path is certain to be taken.
		cfg.Store = store.KindBolt
	}
	c := startCluster(t, 3, compact)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	holdMany(t, l, n, time.Hour)
	short, err := l.Acquire(ctx, "short", lock.AcquireOptions{TTL: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if err := l.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	t.Logf("snapshot of %d locks on the leader took %v", n+1, time.Since(start))

	cfg := DefaultConfig("4")
	fastConfig(t)(&cfg)
	compact(&cfg)
	cfg.DataDir = t.TempDir()
	s4, err := StartServer(ctx, cfg, []string{l.APIAddr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s4.Shutdown() })
	c.Servers = append(c.Servers, s4)
	deadline := time.Now().Add(time.Minute)
	for s4.fsm.NumLocks() < n || s4.fsm.LastToken() < l.fsm.LastToken() {
		if time.Now().After(deadline) {
			t.Fatalf("node 4 has %d locks, last token %d; want %d and %d", s4.fsm.NumLocks(), s4.fsm.LastToken(), n, l.fsm.LastToken())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The leader's log no longer starts at 1, so node 4 cannot have
	// replayed it: its state came from the snapshot.
	if first := firstIndex(l); first <= 1 {
		t.Errorf("the leader's log still starts at index %d: the test did not exercise snapshot install", first)
	}
	if s4.Restores() == 0 {
		t.Error("node 4 caught up without restoring a snapshot")
	}

	// Hand leadership to node 4, from whichever node leads now (on a
	// loaded machine leadership may have moved since l was found).
	for {
		cur, err := WaitLeader(ctx, c.Nodes()...)
		if err != nil {
			t.Fatal(err)
		}
		if cur == s4.Node {
			break
		}
		err = cur.Raft().LeadershipTransferToServer(raft.ServerID("4"), raft.ServerAddress(s4.RaftAddr())).Error()
		if err == nil {
			break
		}
		if !errors.Is(err, raft.ErrNotLeader) && !errors.Is(err, raft.ErrLeadershipTransferInProgress) {
			t.Fatalf("transfer to node 4: %v", err)
		}
		t.Logf("transfer to node 4 from node %s: %v; retrying", cur.ID(), err)
	}
	if _, err := WaitLeader(ctx, s4.Node); err != nil {
		t.Fatal(err)
	}
	info, err := s4.Inspect(ctx, "held/key-000000012345")
	if err != nil {
		t.Fatalf("Inspect on the restored leader: %v", err)
	}
	if want, _ := l.fsm.Lock("held/key-000000012345"); info.Token != lock.Token(want.Token) {
		t.Errorf("restored token %d, want %d", info.Token, want.Token)
	}
	// The short lease expires under the new leader (its timer was rebuilt
	// from the restored table) and the key is granted again.
	next, err := s4.Acquire(ctx, "short", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("the short lease never expired under the restored leader: %v", err)
	}
	if next.Token <= short.Token {
		t.Errorf("token %d after restore, want > %d", next.Token, short.Token)
	}
}

func firstIndex(n *Node) uint64 {
	i, _ := n.stores.Log.FirstIndex()
	return i
}
