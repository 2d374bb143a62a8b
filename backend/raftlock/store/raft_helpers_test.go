package store_test

import (
	"errors"
	"fmt"
	"io"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// countFSM is a no-op FSM that counts applied commands and keeps the last
// one, so tests can check that what was committed reached the state machine.
type countFSM struct {
	n       atomic.Uint64
	last    atomic.Pointer[[]byte]
	applied chan struct{} // signalled (without blocking) after each Apply
}

func newCountFSM() *countFSM { return &countFSM{applied: make(chan struct{}, 1)} }

func (f *countFSM) Apply(l *raft.Log) any {
	d := append([]byte(nil), l.Data...)
	f.last.Store(&d)
	f.n.Add(1)
	select {
	case f.applied <- struct{}{}:
	default:
	}
	return nil
}

// waitApplied waits until the FSM has applied at least n commands.
func (f *countFSM) waitApplied(tb testing.TB, n uint64, timeout time.Duration) {
	tb.Helper()
	deadline := time.After(timeout)
	for f.n.Load() < n {
		select {
		case <-f.applied:
		case <-deadline:
			tb.Fatalf("FSM applied %d commands within %v, want %d", f.n.Load(), timeout, n)
		}
	}
}

func (f *countFSM) Snapshot() (raft.FSMSnapshot, error) { return noopSnapshot{}, nil }
func (f *countFSM) Restore(rc io.ReadCloser) error {
	_, err := io.Copy(io.Discard, rc)
	return errors.Join(err, rc.Close())
}

type noopSnapshot struct{}

func (noopSnapshot) Persist(s raft.SnapshotSink) error { return s.Close() }
func (noopSnapshot) Release()                          {}

// raftConfig is tuned for loopback: short timeouts, no logging, and
// snapshots pushed out of the way so benchmarks measure the commit path.
func raftConfig(id raft.ServerID) *raft.Config {
	c := raft.DefaultConfig()
	c.LocalID = id
	c.HeartbeatTimeout = 500 * time.Millisecond
	c.ElectionTimeout = 500 * time.Millisecond
	c.LeaderLeaseTimeout = 250 * time.Millisecond
	c.CommitTimeout = 5 * time.Millisecond
	c.Logger = hclog.NewNullLogger()
	c.SnapshotThreshold = 1 << 40
	c.SnapshotInterval = time.Hour
	return c
}

// waitLeader waits until one of nodes is leader and returns its index.
// obs must be the channel the nodes' leader observers send to.
func waitLeader(tb testing.TB, nodes []*raft.Raft, obs <-chan raft.Observation, timeout time.Duration) int {
	tb.Helper()
	deadline := time.After(timeout)
	for {
		for i, n := range nodes {
			if n.State() == raft.Leader {
				return i
			}
		}
		select {
		case <-obs:
		case <-deadline:
			tb.Fatalf("no leader elected within %v", timeout)
		}
	}
}

func leaderObserver(ch chan raft.Observation) *raft.Observer {
	return raft.NewObserver(ch, false, func(o *raft.Observation) bool {
		_, ok := o.Data.(raft.LeaderObservation)
		return ok
	})
}

// cluster is a real in-process Raft cluster over loopback TCP, each node with
// its own store of one kind.
type cluster struct {
	nodes  []*raft.Raft
	fsms   []*countFSM
	leader *raft.Raft
}

// startCluster starts size nodes with stores of kind, bootstraps them, waits
// for a leader and registers their shutdown with tb.Cleanup.
func startCluster(tb testing.TB, kind store.Kind, size int) *cluster {
	tb.Helper()
	c := &cluster{}
	obs := make(chan raft.Observation, 64)
	var servers []raft.Server
	type node struct {
		conf   *raft.Config
		stores *store.Stores
		trans  *raft.NetworkTransport
	}
	var ns []node
	for i := range size {
		st, err := store.Open(tb.TempDir(), kind)
		if err != nil {
			tb.Fatal(err)
		}
		trans, err := raft.NewTCPTransport("127.0.0.1:0", nil, 4, 10*time.Second, io.Discard)
		if err != nil {
			st.Close()
			tb.Fatal(err)
		}
		conf := raftConfig(raft.ServerID(fmt.Sprintf("node%d", i)))
		ns = append(ns, node{conf, st, trans})
		servers = append(servers, raft.Server{ID: conf.LocalID, Address: trans.LocalAddr()})
	}
	var observers []*raft.Observer
	tb.Cleanup(func() {
		// Raft first, then its transport and stores (Close after Shutdown).
		for i, r := range c.nodes {
			r.DeregisterObserver(observers[i])
			if err := r.Shutdown().Error(); err != nil {
				tb.Errorf("shutdown node%d: %v", i, err)
			}
		}
		for _, n := range ns {
			if err := n.trans.Close(); err != nil {
				tb.Errorf("close transport: %v", err)
			}
			if err := n.stores.Close(); err != nil {
				tb.Errorf("close stores: %v", err)
			}
		}
	})
	for _, n := range ns {
		fsm := newCountFSM()
		r, err := raft.NewRaft(n.conf, fsm, n.stores.Log, n.stores.Stable, raft.NewInmemSnapshotStore(), n.trans)
		if err != nil {
			tb.Fatal(err)
		}
		o := leaderObserver(obs)
		r.RegisterObserver(o)
		observers = append(observers, o)
		c.nodes = append(c.nodes, r)
		c.fsms = append(c.fsms, fsm)
	}
	// Bootstrapping every node with the same configuration is allowed.
	for i, r := range c.nodes {
		if err := r.BootstrapCluster(raft.Configuration{Servers: servers}).Error(); err != nil {
			tb.Fatalf("bootstrap node%d: %v", i, err)
		}
	}
	c.leader = c.nodes[waitLeader(tb, c.nodes, obs, 20*time.Second)]
	if err := c.leader.Barrier(10 * time.Second).Error(); err != nil {
		tb.Fatalf("barrier: %v", err)
	}
	return c
}
