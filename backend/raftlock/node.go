// Package raftlock is lockgate's native lock service (docs/raftlock.md) on
// github.com/hashicorp/raft: a Raft-replicated lock table with FIFO queues of
// waiters on the leader, grants pushed to waiters the moment they commit,
// fencing tokens from a replicated counter, expiry from the leader's clock
// carried inside the log, and recovery of every held lock by a new leader.
//
// A Node is one server. On the leader it implements lock.Locker; on a
// follower every lock call returns a *lock.NotLeaderError naming the leader.
// docs/raftlock.md maps each part of the specification to the code.
package raftlock

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Node is one raftlock server: hashicorp/raft with a durable store, file
// snapshots and the lock state machine, plus the leader's queues and expiry
// timers. It is safe for concurrent use.
type Node struct {
	cfg    Config
	log    *slog.Logger
	fsm    *fsm.FSM
	raft   *raft.Raft
	stores *store.Stores
	stream *faultStream
	trans  *raft.NetworkTransport
	// contact wraps trans for Raft, noting each append's arrival
	// (contact.go).
	contact *contactTransport
	sched   *scheduler
	batch   *batcher
	// watches are this node's open watches, fed from its state machine.
	watches *watchHub
	// members sends this node's membership RPCs (its join, forwarded
	// requests) with its TLS and token.
	members *MembershipClient
	// scanMu lets one console scan of the lock table run at a time (each
	// holds the state machine's read lock for the whole table); the API
	// transport is the console's to reach the other members (console.go).
	scanMu sync.Mutex
	// backupMu lets one backup be built at a time (each holds about
	// three copies of the state in memory: backup.go).
	backupMu         sync.Mutex
	apiTransportOnce sync.Once
	apiTransport     http.RoundTripper

	session *Session // the Locker methods of Node itself

	restores atomic.Int64 // snapshots installed into the state machine
	// restoreNanos and snapshotNanos are the durations of the last
	// restore and of the last snapshot (copy to persisted).
	restoreNanos, snapshotNanos atomic.Int64
	metrics                     *nodeMetrics

	gateState

	notify   chan bool
	shutdown chan struct{}
	wg       sync.WaitGroup
	once     sync.Once
	err      error
	haltOnce sync.Once
}

var (
	_ lock.Locker          = (*Node)(nil)
	_ lock.MultiLocker     = (*Node)(nil)
	_ lock.Watcher         = (*Node)(nil)
	_ lock.FeatureReporter = (*Node)(nil)
)

// New starts a server: it opens (or creates) the durable state under
// cfg.DataDir, replays it, and joins the Raft protocol. With cfg.Bootstrap
// and no prior state it forms a single-node cluster; otherwise it waits to
// be contacted by a leader (after Join, or as a restarted member).
func New(cfg Config) (*Node, error) {
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("raftlock: data dir: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		log:      cfg.Logger.With("node", cfg.ID),
		fsm:      fsm.New(),
		notify:   make(chan bool, 16),
		shutdown: make(chan struct{}),
	}
	n.halted = make(chan struct{})
	if cfg.readsFormat != 0 {
		n.fsm.SetMaxFormat(cfg.readsFormat)
	}
	n.fsm.SetHaltHandler(n.halt)
	if cfg.insecurePeers() {
		n.log.Warn("INSECURE: the Raft transport authenticates no peer (--insecure-raft-no-peer-auth): anyone who reaches it can rewrite the lock table",
			"raft_addr", cfg.RaftAddr, "raft_advertise", cfg.RaftAdvertise)
	}
	n.members = &MembershipClient{Token: cfg.MembershipToken}
	if cfg.TLS != nil {
		n.members.TLS = cfg.TLS.ClientConfig()
	}
	n.sched = newScheduler(n)
	n.batch = newBatcher(n)
	n.watches = newWatchHub(n)
	n.metrics = newNodeMetrics(n)
	n.fsm.SetObserver(n.sched.observe)
	n.session = n.NewSession()
	if err := n.start(); err != nil {
		// raft may be running already (a step after NewRaft failed): it
		// stops before its stores close.
		close(n.shutdown)
		if n.raft != nil {
			n.raft.Shutdown().Error()
		}
		n.closeResources()
		return nil, err
	}
	n.wg.Add(2)
	go n.watchLeadership()
	go n.monitorFormats()
	return n, nil
}

func (n *Node) start() error {
	var err error
	if n.stores, err = store.Open(n.cfg.DataDir, n.cfg.Store); err != nil {
		return err
	}
	n.log.Info("raft store", "kind", n.stores.Kind, "why", n.stores.Why)
	hl := hclog.New(&hclog.LoggerOptions{Name: "raft", Level: hclog.Warn, Output: n.cfg.RaftLogOutput})
	// store.Open holds DataDir's lock, so the snapshots are this node's
	// alone from here on.
	snaps, err := store.OpenSnapshots(filepath.Join(n.cfg.DataDir, snapshotDirName), hl)
	if err != nil {
		return fmt.Errorf("raftlock: %w", err)
	}
	// A corrupt newest snapshot: fall back to an older one and the log if
	// they are complete, else refuse with the file's name (raft itself
	// would panic on the first compacted entry).
	// A snapshot of a format this binary does not read is not corrupt:
	// falling back past it would replay entries of that format too. Such
	// a node does not start.
	var unreadable error
	load := func(rc io.ReadCloser) error {
		scratch := fsm.New()
		scratch.SetMaxFormat(n.fsm.ReadsFormat())
		err := scratch.Restore(rc)
		if errors.Is(err, fsm.ErrUnknownFormat) {
			unreadable = err
			return nil
		}
		return err
	}
	if err := snaps.Recover(n.stores.Log, load, hl); err != nil {
		return fmt.Errorf("raftlock: %w", err)
	}
	if unreadable != nil {
		n.log.Error("this node's newest snapshot is of a format this binary does not read: not starting", "err", unreadable)
		return fmt.Errorf("raftlock: %w; run a binary that reads it on this data directory", unreadable)
	}
	// Compaction keeps the log back to the second newest snapshot, so
	// that such a fallback is always possible.
	//
	// The newest entries are also kept in memory (raft.LogCache): the
	// leader reads every entry back once per follower to send it, and a
	// follower reads every entry back to apply it, each a read and a
	// decode from the log file otherwise. Writes still go to the log,
	// and are synced, before the cache holds them.
	logs, err := raft.NewLogCache(logCacheEntries, store.LogForFallback(n.stores.Log, snaps))
	if err != nil {
		return fmt.Errorf("raftlock: %w", err)
	}
	if n.stream, err = newFaultStream(n.cfg.RaftAddr, n.cfg.PeerDial, n.cfg.TLS, n.log); err != nil {
		return err
	}
	if n.cfg.RaftAdvertise != "" {
		n.stream.advertise = advertiseAddr(n.cfg.RaftAdvertise)
	}
	n.trans = raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: n.stream, MaxPool: 3, Timeout: 10 * time.Second, Logger: hl,
		// 1 turns pipelined replication off. hashicorp/raft's pipeline
		// can deadlock when a follower rejects an append while the
		// sender waits on the full pipeline: that follower then gets
		// heartbeats but never another entry, and Shutdown hangs
		// (hashicorp/raft#612; seen here in TestSnapshot100k, whose
		// joiner rejects appends until it installs the snapshot).
		// Pipelining overlaps at most two requests at the default
		// setting, so little is lost.
		MaxRPCsInFlight: pipelineOff,
	})
	rc := raft.DefaultConfig()
	rc.LocalID = raft.ServerID(n.cfg.ID)
	rc.HeartbeatTimeout = n.cfg.HeartbeatTimeout
	rc.ElectionTimeout = n.cfg.ElectionTimeout
	rc.LeaderLeaseTimeout = n.cfg.LeaderLeaseTimeout
	rc.CommitTimeout = n.cfg.CommitTimeout
	rc.SnapshotThreshold = n.cfg.SnapshotThreshold
	rc.SnapshotInterval = n.cfg.SnapshotInterval
	rc.TrailingLogs = n.cfg.TrailingLogs
	rc.NotifyCh = n.notify
	rc.Logger = hl
	rc.BatchApplyCh = true
	rc.NoLegacyTelemetry = true
	if err := raft.ValidateConfig(rc); err != nil {
		return fmt.Errorf("raftlock: %w", err)
	}
	has, err := raft.HasExistingState(logs, n.stores.Stable, snaps)
	if err != nil {
		return fmt.Errorf("raftlock: reading existing state: %w", err)
	}
	n.contact = newContactTransport(n.trans, n.shutdown)
	if n.raft, err = raft.NewRaft(rc, restoreCounter{FSM: n.fsm, n: &n.restores,
		took: func(d time.Duration) { n.restoreNanos.Store(int64(d)) }, persisted: func(d time.Duration) { n.snapshotNanos.Store(int64(d)) }}, logs, n.stores.Stable, snaps, n.contact); err != nil {
		return fmt.Errorf("raftlock: starting raft: %w", err)
	}
	if n.cfg.Bootstrap && !has {
		boot := raft.Configuration{Servers: []raft.Server{{ID: rc.LocalID, Address: n.trans.LocalAddr()}}}
		if err := n.raft.BootstrapCluster(boot).Error(); err != nil && !errors.Is(err, raft.ErrCantBootstrap) {
			return fmt.Errorf("raftlock: bootstrap: %w", err)
		}
		n.log.Info("bootstrapped a new cluster", "raft_addr", n.trans.LocalAddr())
	}
	n.log.Info("raftlock node started", "raft_addr", n.trans.LocalAddr(), "api_addr", n.cfg.APIAddr, "existing_state", has)
	return nil
}

// restoreCounter counts snapshot restores (at start and from a leader's
// InstallSnapshot), for operators and tests.
type restoreCounter struct {
	*fsm.FSM
	n *atomic.Int64
	// took and persisted, when set, get the time of each restore and of
	// each snapshot (state machine copy to persisted bytes).
	took, persisted func(time.Duration)
}

func (r restoreCounter) Restore(rc io.ReadCloser) error {
	r.n.Add(1)
	start := time.Now()
	err := r.FSM.Restore(rc)
	if r.took != nil {
		r.took(time.Since(start))
	}
	return err
}

// Snapshot times the snapshot from the state machine's copy to its
// persisted end.
func (r restoreCounter) Snapshot() (raft.FSMSnapshot, error) {
	start := time.Now()
	s, err := r.FSM.Snapshot()
	if err != nil || r.persisted == nil {
		return s, err
	}
	return timedSnapshot{s, start, r.persisted}, nil
}

type timedSnapshot struct {
	raft.FSMSnapshot
	start time.Time
	done  func(time.Duration)
}

func (t timedSnapshot) Persist(sink raft.SnapshotSink) error {
	err := t.FSMSnapshot.Persist(sink)
	if err == nil {
		t.done(time.Since(t.start))
	}
	return err
}

// Restores is how many snapshots this node's state machine has restored.
func (n *Node) Restores() int64 { return n.restores.Load() }

// watchLeadership runs the scheduler's leader duties while this node leads.
func (n *Node) watchLeadership() {
	defer n.wg.Done()
	for {
		select {
		case <-n.shutdown:
			n.sched.stepDown()
			return
		case leader := <-n.notify:
			if leader {
				n.log.Info("became leader", "term", n.raft.Stats()["term"])
				n.wg.Add(1)
				go func() { defer n.wg.Done(); n.sched.becomeLeader() }()
			} else {
				n.log.Info("lost leadership")
				n.sched.stepDown()
			}
		}
	}
}

// ID is the node's Raft server id.
func (n *Node) ID() string { return n.cfg.ID }

// RaftAddr is the address the Raft transport listens on.
func (n *Node) RaftAddr() string { return string(n.trans.LocalAddr()) }

// APIAddr is the client API address recorded in the member directory.
func (n *Node) APIAddr() string { return n.cfg.APIAddr }

// Raft exposes the underlying hashicorp/raft instance for operators' tools
// (leadership transfer, stats). Do not Apply to it directly.
func (n *Node) Raft() *raft.Raft { return n.raft }

// IsLeader reports whether this node leads and has finished taking over
// (its queues and expiry timers are live).
func (n *Node) IsLeader() bool { return n.sched.isReady() }

// Leader returns the current leader's id and client API address, as far as
// this node knows ("" when unknown). A follower names a leader only while
// it has heard from it within leaderContactBound: hashicorp/raft keeps the
// last leader until the follower's own election starts (one to two
// heartbeat timeouts after the last contact), so a leader that crashed was
// still named, and clients spent their redirects on a dead address.
func (n *Node) Leader() (id, apiAddr string) {
	_, lid := n.raft.LeaderWithID()
	if lid == "" || !n.heardFrom(string(lid)) {
		return "", ""
	}
	return string(lid), n.fsm.Members()[string(lid)]
}

// heardFrom reports whether the leader hint lid is fresh: this node itself,
// or a leader whose last append, heartbeat or snapshot arrived within
// leaderContactBound, accepted or not (contactTransport: while a new
// leader walks back a follower's diverging log, the follower rejects its
// appends for seconds, and raft.LastContact, which only accepted ones
// move, stands still although the leader is alive and talking).
func (n *Node) heardFrom(lid string) bool {
	if lid == n.cfg.ID {
		return true
	}
	bound := n.leaderContactBound()
	if n.contact != nil && n.contact.heardWithin(lid, bound) {
		return true
	}
	last := n.raft.LastContact()
	return !last.IsZero() && time.Since(last) <= bound
}

// leaderContactBound is how long a follower may go without hearing from
// the leader and still name it: the longer of the heartbeat and election
// timeouts. A live leader sends a heartbeat every tenth of its heartbeat
// timeout, so only a leader that has failed (or is cut off) goes silent
// that long.
func (n *Node) leaderContactBound() time.Duration {
	return max(n.cfg.HeartbeatTimeout, n.cfg.ElectionTimeout)
}

// notLeader is the redirect error a follower returns.
func (n *Node) notLeader() error {
	id, addr := n.Leader()
	return &lock.NotLeaderError{LeaderID: id, LeaderAddr: addr}
}

// Shutdown stops the node: a leader first hands leadership to another
// voter (so the cluster does not wait an election timeout for a new one),
// waiting callers get an error (the SDK re-sends them to the new leader),
// Raft shuts down, and the stores are closed. It is idempotent.
func (n *Node) Shutdown() error { return n.stop(true) }

// stop is Shutdown; transfer false skips the handover, for a whole cluster
// going down together (there is nobody to hand over to).
func (n *Node) stop(transfer bool) error {
	n.once.Do(func() {
		if transfer {
			n.transferLeadership()
		}
		n.watches.shutdown(fmt.Errorf("raftlock: node %s shut down: %w", n.cfg.ID, lock.ErrClosed))
		n.session.Close()
		close(n.shutdown)
		if n.raft != nil {
			if err := n.raft.Shutdown().Error(); err != nil {
				n.err = err
			}
		}
		n.wg.Wait()
		n.closeResources()
		n.log.Info("raftlock node stopped")
	})
	return n.err
}

// transferLeadership hands leadership to another voter if this node leads
// one; a failure (no voter caught up, a timeout) only means the others
// elect a leader the usual way.
func (n *Node) transferLeadership() {
	if n.raft == nil || n.raft.State() != raft.Leader {
		return
	}
	cf := n.raft.GetConfiguration()
	if cf.Error() != nil {
		return
	}
	others := 0
	for _, s := range cf.Configuration().Servers {
		if s.Suffrage == raft.Voter && s.ID != raft.ServerID(n.cfg.ID) {
			others++
		}
	}
	if others == 0 {
		return
	}
	if err := n.await(n.raft.LeadershipTransfer(), 2*n.cfg.ElectionTimeout); err != nil {
		n.log.Warn("shutdown: leadership transfer failed; the others will elect a leader", "err", err)
		return
	}
	id, _ := n.raft.LeaderWithID()
	n.log.Info("shutdown: leadership transferred", "to", id)
}

func (n *Node) closeResources() {
	if n.contact != nil {
		n.contact.closeHeartbeats()
	}
	if n.trans != nil {
		n.trans.Close()
	} else if n.stream != nil {
		n.stream.Close()
	}
	if n.stores != nil {
		if err := n.stores.Close(); err != nil && n.err == nil {
			n.err = err
		}
	}
}

// snapshotDirName is the directory under DataDir that holds the snapshots.
const snapshotDirName = "snapshots"

// logCacheEntries is how many of the newest log entries are kept in
// memory, by index, for replication and for applying on followers: they are
// read back within an entry or two of being written, so a few dozen cover
// it. Few, because an entry may be large (up to maxBatchOps operations,
// each with a value), and the cache holds the newest ones whatever their
// size; a follower further behind reads from the log file as before.
const logCacheEntries = 64

// pipelineOff is NetworkTransportConfig.MaxRPCsInFlight without pipelining.
const pipelineOff = 1

// apply stamps entry with the leader's clock, commits it, and returns the
// state machine's results. timeout bounds the wait to enqueue it.
func (n *Node) apply(entry fsm.Entry, timeout time.Duration) (*fsm.ApplyResult, error) {
	select {
	case <-n.shutdown:
		// Not handed to raft: nothing was done.
		return nil, fmt.Errorf("raftlock: node %s shut down: %w", n.cfg.ID, lock.ErrClosed)
	default:
	}
	entry.Now = n.cfg.Clock.Now()
	start := time.Now()
	f := n.raft.Apply(fsm.Encode(entry), timeout)
	if err := n.await(f, 0); err != nil {
		return nil, n.writeErr(err)
	}
	n.metrics.commit.Observe(time.Since(start).Seconds())
	n.metrics.countEntry(entry.Ops)
	switch r := f.Response().(type) {
	case *fsm.ApplyResult:
		return r, nil
	case error:
		return nil, fmt.Errorf("raftlock: state machine rejected entry: %w", r)
	default:
		return nil, fmt.Errorf("raftlock: unexpected apply response %T", r)
	}
}

// applyCtx commits ops through the batcher, with the timeout taken from ctx
// (or ApplyTimeout).
func (n *Node) applyCtx(ctx context.Context, ops ...fsm.Op) (*fsm.ApplyResult, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return n.batch.submit(ops, n.timeout(ctx))
}

func (n *Node) timeout(ctx context.Context) time.Duration {
	t := n.cfg.ApplyTimeout
	if d, ok := ctx.Deadline(); ok && time.Until(d) < t {
		t = max(time.Until(d), time.Millisecond)
	}
	return t
}

// verifyLeader makes a read linearizable: this node has taken over (all
// entries of earlier terms are applied) and a quorum still follows it.
func (n *Node) verifyLeader() error {
	if !n.sched.isReady() {
		return n.notLeader()
	}
	if err := n.await(n.raft.VerifyLeader(), 0); err != nil {
		return n.raftErr(err)
	}
	return nil
}

// AppendData writes key=value to the replicated data store (the
// design's Append Data RPC, docs/raftlock.md): committed by a quorum before it returns.
func (n *Node) AppendData(ctx context.Context, key string, value []byte) error {
	if err := kit.ValidateKey(key); err != nil {
		return err
	}
	if len(value) > maxDataValue {
		return fmt.Errorf("raftlock: data value of %d bytes exceeds the maximum of %d", len(value), maxDataValue)
	}
	if strings.HasPrefix(key, fsm.SystemPrefix) {
		return &lock.ValidationError{Field: "key", Value: key, Reason: "starts with " + fsm.SystemPrefix + ", which the service keeps for itself (its format gate, its identity)", Err: lock.ErrInvalidKey}
	}
	res, err := n.applyCtx(ctx, fsm.Op{Type: fsm.OpAppendData, Key: key, Value: value})
	if err != nil {
		return err
	}
	if res.Results[0].Status != fsm.StatusOK {
		return fmt.Errorf("raftlock: append data %q refused (status %d)", key, res.Results[0].Status)
	}
	return nil
}

// maxDataValue bounds one data value (the log is not a blob store).
const maxDataValue = 64 << 10

// ReadData returns the value of a data key, linearizably (leader only).
// A missing key gives lock.ErrNotFound.
func (n *Node) ReadData(ctx context.Context, key string) ([]byte, error) {
	if err := n.verifyLeader(); err != nil {
		return nil, err
	}
	v, ok := n.fsm.Data(key)
	if !ok {
		return nil, fmt.Errorf("raftlock: data key %q: %w", key, lock.ErrNotFound)
	}
	return v, nil
}
