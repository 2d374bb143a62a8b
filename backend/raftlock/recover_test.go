package raftlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
)

// TestRecoverLostMajority: of three nodes, one follower stops early and
// misses the last grants; the two others are then destroyed with their
// data. The survivor's directory, recovered into a one-node cluster,
// starts as its leader with the leases it knew, grants tokens above every
// token the lost majority issued (also for a key whose grant it never
// saw), and grows back to three nodes with two fresh ones whose state
// machines agree with it.
func TestRecoverLostMajority(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var maxSeen lock.Token // every token any client was granted
	acquire := func(n *Node, key string) *lock.Lease {
		t.Helper()
		lease, err := n.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Hour, Value: []byte(key)})
		if err != nil {
			t.Fatalf("acquire %s: %v", key, err)
		}
		maxSeen = max(maxSeen, lease.Token)
		return lease
	}
	held := map[string]lock.Token{}
	for i := range 6 {
		key := fmt.Sprintf("old%d", i)
		lease := acquire(l, key)
		if i%2 == 0 {
			if err := l.Release(ctx, lease); err != nil {
				t.Fatal(err)
			}
			continue
		}
		held[key] = lease.Token
	}
	var surv *Server
	for _, s := range c.Servers {
		if s.Node != l {
			surv = s
			break
		}
	}
	applied := l.fsm.AppliedIndex()
	eventually(t, "the survivor applies the first grants", func() bool { return surv.fsm.AppliedIndex() >= applied })
	survID, survDir, survRaft := surv.ID(), surv.cfg.DataDir, surv.RaftAddr()
	if err := surv.Shutdown(); err != nil {
		t.Fatal(err)
	}
	// Grants the survivor never sees: clients hold these tokens.
	var lostKeys []string
	for i := range 5 {
		key := fmt.Sprintf("lost%d", i)
		acquire(l, key)
		lostKeys = append(lostKeys, key)
	}
	// The majority is lost for good: stopped hard, data deleted.
	var lostIDs []string
	for _, s := range c.Servers {
		if s != surv {
			lostIDs = append(lostIDs, s.ID())
			s.stop(false)
			if err := os.RemoveAll(s.cfg.DataDir); err != nil {
				t.Fatal(err)
			}
		}
	}

	start := time.Now()
	rep, err := RecoverDataDir(survDir, RecoverOptions{ID: survID, Logger: c.Servers[0].log})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("recovered in %v: %+v", time.Since(start), rep)
	want := raft.Configuration{Servers: []raft.Server{{Suffrage: raft.Voter, ID: raft.ServerID(survID), Address: raft.ServerAddress(survRaft)}}}
	if !slices.Equal(rep.Configuration.Servers, want.Servers) {
		t.Errorf("new configuration %s, want %s", FormatConfiguration(rep.Configuration), FormatConfiguration(want))
	}
	if len(rep.Previous.Servers) != 3 {
		t.Errorf("previous configuration %s, want the three nodes", FormatConfiguration(rep.Previous))
	}
	if rep.CounterBefore >= uint64(maxSeen) {
		t.Fatalf("the survivor's counter %d is not behind the tokens granted without it (up to %d): the test lost its point", rep.CounterBefore, maxSeen)
	}
	if rep.CounterAfter <= uint64(maxSeen) {
		t.Errorf("counter after recovery %d, want above every token seen (%d)", rep.CounterAfter, maxSeen)
	}
	if rep.LastIndex < applied || rep.Leases != len(held) {
		t.Errorf("report: last index %d (want >= %d), %d leases (want %d)", rep.LastIndex, applied, rep.Leases, len(held))
	}
	slices.Sort(lostIDs)
	if !slices.Equal(rep.DroppedMembers, lostIDs) {
		t.Errorf("dropped from the member directory: %v, want %v", rep.DroppedMembers, lostIDs)
	}

	cfg := DefaultConfig(survID)
	fastConfig(t)(&cfg)
	cfg.DataDir, cfg.RaftAddr = survDir, survRaft
	rec, err := StartServer(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rec.Shutdown() })
	if _, err := WaitLeader(ctx, rec.Node); err != nil {
		t.Fatalf("the recovered node does not lead: %v", err)
	}
	for key, tok := range held {
		info, err := rec.Inspect(ctx, key)
		if err != nil || info.Token != tok {
			t.Errorf("Inspect(%s) after recovery = %+v, %v; want the lease kept with token %d", key, info, err, tok)
		}
	}
	if _, err := rec.Inspect(ctx, lostKeys[0]); !errors.Is(err, lock.ErrNotFound) {
		t.Errorf("Inspect(%s), granted only by the lost majority: %v, want lock.ErrNotFound", lostKeys[0], err)
	}
	for _, key := range []string{lostKeys[0], "fresh"} {
		lease, err := rec.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		if lease.Token <= maxSeen {
			t.Errorf("token %d for %s after recovery, want above every token seen (%d)", lease.Token, key, maxSeen)
		}
	}

	// Grow back to three with fresh nodes.
	nodes := []*Node{rec.Node}
	for _, id := range []string{"4", "5"} {
		cfg := DefaultConfig(id)
		fastConfig(t)(&cfg)
		cfg.DataDir = filepath.Join(t.TempDir(), "node-"+id)
		s, err := StartServer(ctx, cfg, []string{rec.APIAddr()})
		if err != nil {
			t.Fatalf("node %s joining the recovered node: %v", id, err)
		}
		t.Cleanup(func() { s.Shutdown() })
		nodes = append(nodes, s.Node)
	}
	nl, err := WaitLeader(ctx, nodes...)
	if err != nil {
		t.Fatal(err)
	}
	if cf := nl.Raft().GetConfiguration(); cf.Error() != nil || len(cf.Configuration().Servers) != 3 {
		t.Fatalf("configuration after two joins: %s, %v", FormatConfiguration(cf.Configuration()), cf.Error())
	}
	lease, err := nl.Acquire(ctx, "after-join", lock.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token <= maxSeen {
		t.Errorf("token %d after the joins, want above %d", lease.Token, maxSeen)
	}
	eventually(t, "three state machines agree at the same applied index", func() bool {
		var idx uint64
		var dig [32]byte
		for i, n := range nodes {
			before := n.fsm.AppliedIndex()
			d := n.fsm.Digest()
			if n.fsm.AppliedIndex() != before {
				return false
			}
			if i == 0 {
				idx, dig = before, d
			} else if before != idx || d != dig {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if lk, ok := n.fsm.Lock("after-join"); !ok || lock.Token(lk.Token) != lease.Token {
			t.Errorf("node %s: the lock granted after the joins is %+v, %v; want token %d", n.ID(), lk, ok, lease.Token)
		}
		members := n.fsm.Members()
		for _, id := range lostIDs {
			if _, ok := members[id]; ok {
				t.Errorf("node %s: lost member %s still in the member directory %v", n.ID(), id, members)
			}
		}
	}
}

// TestRecoverRefuses: RecoverDataDir writes nothing into a directory
// without state or one a running node holds, and refuses an id that is
// not a member or an address peers cannot dial. On a stopped node's
// directory, --token-floor sets the next token.
func TestRecoverRefuses(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := RecoverDataDir(missing, RecoverOptions{ID: "1"}); !errors.Is(err, ErrNoState) {
		t.Errorf("a missing directory: %v, want ErrNoState", err)
	}
	if _, err := os.Stat(missing); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("recover created the missing directory %s: %v", missing, err)
	}
	empty := t.TempDir()
	if _, err := RecoverDataDir(empty, RecoverOptions{ID: "1"}); !errors.Is(err, ErrNoState) {
		t.Errorf("an empty directory: %v, want ErrNoState", err)
	}
	if len(listTree(t, empty)) != 1 { // the directory itself
		t.Errorf("recover wrote into an empty directory: %v", listTree(t, empty))
	}

	dir := t.TempDir()
	n, err := startSingle(t, dir, "", func(c *Config) { c.Store = store.KindBolt })
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := n.Acquire(ctx, "held", lock.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := n.RaftAddr()
	before := listTree(t, dir)
	_, err = RecoverDataDir(dir, RecoverOptions{ID: "1"})
	if !errors.Is(err, store.ErrLocked) {
		t.Errorf("the directory of a running node: %v, want store.ErrLocked", err)
	}
	if after := listTree(t, dir); len(after) != len(before) {
		t.Errorf("recover changed a running node's directory: %d entries before, %d after", len(before), len(after))
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}

	if _, err := RecoverDataDir(dir, RecoverOptions{ID: "9"}); !errors.Is(err, ErrNotMember) {
		t.Errorf("an id that is not a member: %v, want ErrNotMember", err)
	}
	if _, err := RecoverDataDir(dir, RecoverOptions{ID: "1", RaftAddr: "0.0.0.0:8081"}); err == nil {
		t.Error("a wildcard Raft address was accepted")
	}
	const floor = 1 << 62
	rep, err := RecoverDataDir(dir, RecoverOptions{ID: "1", TokenFloor: floor, Logger: slog.New(slog.NewTextHandler(tLogWriter{t}, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Store != store.KindBolt || rep.CounterAfter != floor || rep.CounterBefore != uint64(held.Token) {
		t.Errorf("report %+v: want store bolt, counter %d → %d", rep, held.Token, uint64(floor))
	}
	n, err = startSingle(t, dir, raftAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer n.Shutdown()
	if info, err := n.Inspect(ctx, "held"); err != nil || info.Token != held.Token {
		t.Errorf("Inspect(held) = %+v, %v; want the lease kept", info, err)
	}
	lease, err := n.Acquire(ctx, "next", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token != floor+1 {
		t.Errorf("first token after --token-floor %d: %d, want %d", uint64(floor), lease.Token, uint64(floor+1))
	}
}
