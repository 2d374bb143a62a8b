package raftlock

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/lock"
)

// gateNodes runs in-process servers that a test stops and starts again on
// the same data directory and addresses, with another format cap: a
// rolling upgrade's binary swap, in one process.
type gateNodes struct {
	t       *testing.T
	dir     string
	servers map[string]*Server
	raft    map[string]string // id → Raft address, fixed after the first start
	api     map[string]string // id → API address, fixed after the first start
	errs    *errorLog
}

func newGateNodes(t *testing.T) *gateNodes {
	g := &gateNodes{t: t, dir: t.TempDir(), servers: map[string]*Server{}, raft: map[string]string{}, api: map[string]string{}, errs: &errorLog{}}
	t.Cleanup(func() {
		for _, s := range g.servers {
			s.stop(false)
		}
	})
	return g
}

// start starts node id reading formats up to reads (0: all).
func (g *gateNodes) start(id string, reads uint8, join ...string) *Server {
	g.t.Helper()
	cfg := DefaultConfig(id)
	fastConfig(g.t)(&cfg)
	cfg.Logger = slog.New(teeHandler{cfg.Logger.Handler(), g.errs})
	cfg.DataDir = filepath.Join(g.dir, "node-"+id)
	cfg.Bootstrap = id == "1"
	cfg.FormatPollInterval = 100 * time.Millisecond
	cfg.readsFormat = reads
	if a, ok := g.raft[id]; ok {
		cfg.RaftAddr, cfg.APIAddr = a, g.api[id]
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := StartServer(ctx, cfg, join)
	if err != nil {
		g.t.Fatalf("starting node %s: %v", id, err)
	}
	g.servers[id] = s
	g.raft[id], g.api[id] = s.RaftAddr(), s.APIAddr()
	return s
}

func (g *gateNodes) stop(id string) {
	g.servers[id].stop(false)
	delete(g.servers, id)
}

func (g *gateNodes) nodes() []*Node {
	var ns []*Node
	for _, s := range g.servers {
		ns = append(ns, s.Node)
	}
	return ns
}

func (g *gateNodes) leader() *Node {
	g.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := WaitLeader(ctx, g.nodes()...)
	if err != nil {
		g.t.Fatal(err)
	}
	return n
}

// sameState waits until every running node has applied the leader's last
// entry, then requires their state machines' digests to be equal.
func (g *gateNodes) sameState(when string) {
	g.t.Helper()
	l := g.leader()
	if err := l.Raft().Barrier(10 * time.Second).Error(); err != nil {
		g.t.Fatalf("%s: barrier: %v", when, err)
	}
	want := l.fsm.AppliedIndex()
	eventually(g.t, when+": every node applies index "+fmt.Sprint(want), func() bool {
		for _, n := range g.nodes() {
			if n.fsm.AppliedIndex() < want {
				return false
			}
		}
		return true
	})
	d := l.fsm.Digest()
	for _, n := range g.nodes() {
		if n.fsm.AppliedIndex() == want && n.fsm.Digest() != d {
			g.t.Errorf("%s: node %s's state differs from the leader's at index %d", when, n.ID(), want)
		}
	}
}

// refusesBeyondFormat1 checks that n neither offers nor grants what needs
// format 2 or 3.
func refusesBeyondFormat1(t *testing.T, n *Node, when string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if f := n.Features(); f.Has(lock.FeatureSessions) || f.Has(lock.FeatureShared) || f.Has(lock.FeatureSemaphore) || f.Has(lock.FeatureMultiKey) {
		t.Errorf("%s: features %s offered at format 1", when, f)
	}
	if _, err := n.OpenSession(ctx, lock.SessionOptions{}); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("%s: OpenSession = %v, want ErrUnsupported", when, err)
	}
	for what, opts := range map[string]lock.AcquireOptions{
		"shared":    {TTL: time.Minute, Mode: lock.ModeShared},
		"semaphore": {TTL: time.Minute, Permits: 3},
		"lockdelay": {TTL: time.Minute, LockDelay: time.Second},
	} {
		if l, err := n.TryAcquire(ctx, "beyond-"+what, opts); !errors.Is(err, lock.ErrUnsupported) {
			t.Errorf("%s: a %s acquire = %v, %v; want ErrUnsupported", when, what, l, err)
		}
	}
	if _, err := n.TryAcquireAll(ctx, []string{"all-a", "all-b"}, lock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("%s: AcquireAll = %v, want ErrUnsupported", when, err)
	}
}

// TestFormatGateRollingUpgrade: three nodes that read format 1 only (an
// older release) are upgraded one at a time. While any voter reads format
// 1, the gate stays at 1: sessions, shared locks, semaphores and
// AcquireAll are neither offered nor granted, on whichever node leads.
// Once the last one is replaced the gate rises to 3 and all of them work.
// At every step every node's state machine equals the leader's.
func TestFormatGateRollingUpgrade(t *testing.T) {
	g := newGateNodes(t)
	g.start("1", 1)
	g.start("2", 1, g.api["1"])
	g.start("3", 1, g.api["1"])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	l := g.leader()
	held, err := l.Acquire(ctx, "k", lock.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	refusesBeyondFormat1(t, l, "all at format 1")
	g.sameState("all at format 1")

	// Nodes 1 and 2 upgraded in place; node 3 still reads format 1.
	for _, id := range []string{"1", "2"} {
		g.stop(id)
		g.start(id, 0)
		g.sameState("node " + id + " upgraded")
	}
	l = g.leader()
	// The leader has asked every voter and heard node 3 read format 1.
	eventually(t, "the leader to hear every voter", func() bool {
		v := l.lastVoters.Load()
		if v == nil || len(*v) != 3 {
			return false
		}
		for _, r := range *v {
			if r.Reads == 0 || r.ID == "3" && r.Reads != 1 {
				return false
			}
		}
		return true
	})
	if gate := l.fsm.Gate(); gate.Format != 1 {
		t.Fatalf("gate %s with a voter reading format 1", gate)
	}
	refusesBeyondFormat1(t, l, "node 3 at format 1")
	if _, err := l.TryAcquire(ctx, "k", lock.AcquireOptions{TTL: time.Minute}); !errors.As(err, new(*lock.HeldError)) {
		t.Errorf("k while held: %v, want held", err)
	}
	g.sameState("two of three upgraded")

	// A node that reads format 1 cannot join a cluster that writes more:
	// checked when the gate is at 3, below.

	// The last one: the gate rises, the features switch on.
	g.stop("3")
	g.start("3", 0)
	l = g.leader()
	eventually(t, "the gate to rise to 3", func() bool { return l.fsm.Gate().Format == 3 })
	if f := l.Features(); !f.Has(lock.FeatureSessions | lock.FeatureShared | lock.FeatureSemaphore | lock.FeatureMultiKey) {
		t.Errorf("features %s at format 3", f)
	}
	s, err := l.OpenSession(ctx, lock.SessionOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("OpenSession at format 3: %v", err)
	}
	if _, err := l.Acquire(ctx, "in-session", lock.AcquireOptions{Session: s}); err != nil {
		t.Errorf("acquire in a session: %v", err)
	}
	if _, err := l.TryAcquire(ctx, "shared", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared}); err != nil {
		t.Errorf("shared acquire: %v", err)
	}
	if _, err := l.TryAcquireAll(ctx, []string{"all-a", "all-b"}, lock.AcquireOptions{TTL: time.Minute}); err != nil {
		t.Errorf("AcquireAll: %v", err)
	}
	g.sameState("all upgraded")
	for _, n := range g.nodes() {
		info, err := n.fsm.Lock("k")
		if !err || info.Token != uint64(held.Token) {
			t.Errorf("node %s: k %+v, want still held with token %d", n.ID(), info, held.Token)
		}
	}

	// A fourth node that reads only format 1 is refused: it would stop at
	// the first session entry.
	err = joinCapped(t, g, "4", 1)
	if err == nil || !strings.Contains(err.Error(), "reads formats up to 1") {
		t.Errorf("a format-1 node joining a format-3 cluster: %v, want refused", err)
	}
}

// joinCapped tries to join node id, reading up to reads, and returns the
// join's error (the node is stopped either way).
func joinCapped(t *testing.T, g *gateNodes, id string, reads uint8) error {
	cfg := DefaultConfig(id)
	fastConfig(t)(&cfg)
	cfg.DataDir = filepath.Join(g.dir, "node-"+id)
	cfg.readsFormat = reads
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	l := g.leader()
	s, err := StartServer(ctx, cfg, []string{l.APIAddr()})
	if err == nil {
		s.stop(false)
		return nil
	}
	return err
}

// TestHaltOnUnreadableFormat: a node that reads up to format 2 is handed a
// session entry (format 3; written here past the leader's gate, as a
// leader of a newer binary without a gate would): it stops applying and
// serving, says why at ERROR, and the other two keep granting.
func TestHaltOnUnreadableFormat(t *testing.T) {
	g := newGateNodes(t)
	// Node 3 reads up to format 2, so the gate stays at 2: node 1 starts
	// at format 2 as well (alone, it would raise the gate to its own
	// format at once), then is upgraded in place.
	g.start("1", 2)
	g.start("2", 0, g.api["1"])
	low := g.start("3", 2, g.api["1"])
	g.stop("1")
	g.start("1", 0)
	l := g.leader()
	for l == low.Node { // the case needs it a follower (node 1 bootstraps and usually leads)
		low.transferLeadership()
		l = g.leader()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := l.Acquire(ctx, "before", lock.AcquireOptions{TTL: time.Hour}); err != nil {
		t.Fatal(err)
	}
	g.sameState("before")
	applied := low.fsm.AppliedIndex()

	entry := fsm.Entry{Now: time.Now().UnixNano(), Ops: []fsm.Op{{Type: fsm.OpSessionOpen, Key: lock.NewHandle(), Owner: "o", TTL: time.Minute}}}
	if err := l.Raft().Apply(fsm.Encode(entry), 10*time.Second).Error(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-low.Halted():
	case <-ctx.Done():
		t.Fatal("the format-2 node did not halt on a format-3 entry")
	}
	if err := low.HaltErr(); !errors.Is(err, fsm.ErrUnknownFormat) || !strings.Contains(err.Error(), "format 3") {
		t.Errorf("HaltErr = %v, want ErrUnknownFormat naming format 3", err)
	}
	if g.errs.count("STOPPED") == 0 {
		t.Error("no ERROR line says the node stopped")
	}
	// It applied nothing past the entry before it, and serves nothing.
	if got := low.fsm.AppliedIndex(); got != applied {
		t.Errorf("halted node applied up to %d, want %d (nothing from the unreadable entry on)", got, applied)
	}
	if _, err := low.TryAcquire(ctx, "x", lock.AcquireOptions{TTL: time.Minute}); err == nil {
		t.Error("the halted node granted a lock")
	}
	// The others carry on: grants commit on the two that read it.
	delete(g.servers, "3")
	for i := range 3 {
		key := fmt.Sprintf("after-%d", i)
		if _, err := g.leader().Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute}); err != nil {
			t.Fatalf("grant after the halt: %v", err)
		}
	}
	g.sameState("after the halt")
	low.stop(false)
}

// TestFormatDowngrade: the operator's downgrade of a format-3 cluster to
// format 1. While a session lease and a shared holder live, the gate's
// Format stays (they keep renewing) but new work is held to format 1 and
// the command answers what still drains; once they are released it
// lowers the gate and every voter snapshots past it, and a node restarted
// as a format-1 binary then starts and follows without halting. Resume
// lets the gate rise again.
func TestFormatDowngrade(t *testing.T) {
	g := newGateNodes(t)
	g.start("1", 0)
	g.start("2", 0, g.api["1"])
	g.start("3", 0, g.api["1"])
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	l := g.leader()
	eventually(t, "the gate at 3", func() bool { return l.fsm.Gate().Format == 3 })
	s, err := l.OpenSession(ctx, lock.SessionOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	inSession, err := l.Acquire(ctx, "in-session", lock.AcquireOptions{Session: s})
	if err != nil {
		t.Fatal(err)
	}
	shared, err := l.Acquire(ctx, "shared", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared})
	if err != nil {
		t.Fatal(err)
	}
	// A session without a lease, which its client would renew for ever:
	// the drain stops renewing it, and it ends at its expiry.
	empty, err := l.OpenSession(ctx, lock.SessionOptions{TTL: 2 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	// A semaphore waiter queued behind an exclusive holder before the
	// downgrade: at its turn it is refused, and the release that makes
	// its turn commits.
	blocker, err := l.Acquire(ctx, "queued", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	queued := make(chan error, 1)
	go func() {
		_, err := l.Acquire(ctx, "queued", lock.AcquireOptions{TTL: time.Minute, Permits: 2})
		queued <- err
	}()
	eventually(t, "the semaphore waiter to queue", func() bool {
		info, err := l.Inspect(ctx, "queued")
		return err == nil && info.Waiters == 1
	})

	mc := &MembershipClient{}
	via := g.api["2"] // through a follower: it forwards to the leader
	if l.ID() == "2" {
		via = g.api["3"]
	}
	rep, err := mc.ChangeFormat(ctx, via, FormatArgs{DowngradeTo: 1, WaitMs: 300})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Done || rep.Gate.Format != 3 || rep.Gate.Offer != 1 || rep.Drain.Sessions != 2 || rep.Drain.SessionLeases != 1 || rep.Drain.Shared != 1 {
		t.Fatalf("downgrade with a session lease and a shared holder alive: %+v; want not done, format 3 offer 1, two sessions with one lease, one shared holder", rep)
	}
	if err := l.RenewSession(ctx, empty); !errors.Is(err, lock.ErrSessionExpired) {
		t.Errorf("renewing a session without a lease while sessions drain: %v, want ErrSessionExpired", err)
	}
	refusesBeyondFormat1(t, l, "draining")
	if err := l.Release(ctx, blocker); err != nil {
		t.Errorf("a release whose entry would grant a waiter queued before the downgrade: %v", err)
	}
	if err := <-queued; !errors.Is(err, lock.ErrUnsupported) {
		t.Errorf("the semaphore waiter queued before the downgrade: %v, want ErrUnsupported", err)
	}
	// What exists keeps working: the session renews, its lease is held.
	if err := l.RenewSession(ctx, s); err != nil {
		t.Errorf("renewing a session while the downgrade drains: %v", err)
	}
	if err := l.Release(ctx, inSession); err != nil {
		t.Fatal(err)
	}
	if err := l.CloseSession(ctx, s); err != nil {
		t.Fatal(err)
	}
	if err := l.Release(ctx, shared); err != nil {
		t.Fatal(err)
	}
	rep, err = mc.ChangeFormat(ctx, via, FormatArgs{DowngradeTo: 1, WaitMs: 20000})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Done || rep.Gate != (fsm.Gate{Format: 1, Offer: 1, Ceiling: 1}) || len(rep.Snapshots) != 3 {
		t.Fatalf("downgrade after the drain: %+v; want done, gate 1/1/1, three snapshots", rep)
	}
	for id, idx := range rep.Snapshots {
		if idx < rep.Index {
			t.Errorf("voter %s's snapshot at %d, before the lowered gate's %d", id, idx, rep.Index)
		}
	}
	// The gate stays down although every voter reads 3.
	l = g.leader()
	eventually(t, "the leader to hear every voter", func() bool {
		v := l.lastVoters.Load()
		return v != nil && len(*v) == 3 && (*v)[0].Reads == 3 && (*v)[1].Reads == 3 && (*v)[2].Reads == 3
	})
	if gate := l.fsm.Gate(); gate.Format != 1 {
		t.Fatalf("the gate rose during a downgrade: %s", gate)
	}
	// A follower restarted as a format-1 binary starts from its snapshot
	// and follows.
	var low string
	for _, id := range []string{"1", "2", "3"} {
		if id != l.ID() {
			low = id
			break
		}
	}
	g.stop(low)
	restarted := g.start(low, 1)
	if _, err := l.Acquire(ctx, "after-downgrade", lock.AcquireOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}
	g.sameState("a format-1 node after the downgrade")
	if err := restarted.HaltErr(); err != nil {
		t.Fatalf("the format-1 node halted: %v", err)
	}
	// Back up: the format-1 node upgraded again, resume, the gate rises.
	g.stop(low)
	g.start(low, 0)
	if _, err := mc.ChangeFormat(ctx, g.api[l.ID()], FormatArgs{Resume: true}); err != nil {
		t.Fatal(err)
	}
	l = g.leader()
	eventually(t, "the gate back at 3", func() bool { return l.fsm.Gate() == fsm.Gate{Format: 3, Offer: 3} })
	if _, err := l.OpenSession(ctx, lock.SessionOptions{}); err != nil {
		t.Errorf("OpenSession after resume: %v", err)
	}
}
