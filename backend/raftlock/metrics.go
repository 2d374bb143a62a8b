package raftlock

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/hashicorp/raft"
	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/prometheus/client_golang/prometheus"
)

// nodeMetrics are the Prometheus metrics of one node: Raft's health (what
// an operator alerts on: no leader, a follower out of contact, the applied
// index falling behind, slow commits) and the lock table's size. Gauges are
// read from Raft and the state machine at scrape time; commit latency is
// observed as entries commit.
type nodeMetrics struct {
	n      *Node
	commit prometheus.Histogram

	state, term, commitIndex, appliedIndex, lastIndex, lastContact, peers,
	fsmPending, snapshotIndex, locks, lastToken, waiters, watches, ready, restores *prometheus.Desc
	sessions, snapshotSeconds, restoreSeconds, ops, entries *prometheus.Desc

	// opCounts[t] counts the ops of type t this node committed as leader;
	// entryCount the entries.
	opCounts   [256]atomic.Uint64
	entryCount atomic.Uint64
}

// countEntry counts a committed entry and its ops.
func (m *nodeMetrics) countEntry(ops []fsm.Op) {
	m.entryCount.Add(1)
	for i := range ops {
		m.opCounts[ops[i].Type].Add(1)
	}
}

func newNodeMetrics(n *Node) *nodeMetrics {
	labels := prometheus.Labels{"node": n.cfg.ID}
	d := func(name, help string, variable ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, variable, labels)
	}
	return &nodeMetrics{
		n: n,
		commit: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "lockgate_raft_commit_seconds",
			Help:        "Time to commit and apply one batch of lock operations on the leader (Raft replication to a quorum, fsync included).",
			ConstLabels: labels,
			Buckets:     prometheus.ExponentialBuckets(0.0001, 2, 16), // 100 µs … ~3.3 s
		}),
		state:           d("lockgate_raft_state", "1 for this node's current Raft state.", "state"),
		ready:           d("lockgate_raft_leader_ready", "1 if this node leads and has finished taking over (it grants locks)."),
		term:            d("lockgate_raft_term", "This node's current Raft term."),
		commitIndex:     d("lockgate_raft_commit_index", "Highest log index known to be committed."),
		appliedIndex:    d("lockgate_raft_applied_index", "Highest log index applied to the lock table."),
		lastIndex:       d("lockgate_raft_last_log_index", "Highest index in this node's log."),
		lastContact:     d("lockgate_raft_last_contact_seconds", "Seconds since a follower last heard from the leader (0 on the leader; -1 if never)."),
		peers:           d("lockgate_raft_peers", "Other voters in this node's latest configuration."),
		fsmPending:      d("lockgate_raft_fsm_pending", "Committed batches queued for the state machine."),
		snapshotIndex:   d("lockgate_raft_last_snapshot_index", "Log index of the latest snapshot."),
		restores:        d("lockgate_raft_snapshot_restores_total", "Snapshots installed into the state machine since start."),
		locks:           d("lockgate_raftlock_locks", "Locks in the replicated lock table (held, or expired and not yet released)."),
		lastToken:       d("lockgate_raftlock_last_token", "The last fencing token granted."),
		waiters:         d("lockgate_raftlock_waiters", "Acquires queued on this node (the leader) for a held key."),
		watches:         d("lockgate_raftlock_watches", "Watches open on this node (bounded by Config.MaxWatchers)."),
		sessions:        d("lockgate_raftlock_sessions", "Sessions in the replicated state (open, or expired and not yet ended)."),
		snapshotSeconds: d("lockgate_raft_snapshot_seconds", "Duration of this node's last snapshot, from the state machine's copy to the persisted file (0 before the first)."),
		restoreSeconds:  d("lockgate_raft_restore_seconds", "Duration of this node's last snapshot restore into the state machine (0 before the first)."),
		ops:             d("lockgate_raftlock_ops_total", "Operations this node committed as leader, by op (fsm.OpType names: acquire, renew, session-renew, …).", "op"),
		entries:         d("lockgate_raftlock_entries_total", "Log entries of lock operations this node committed as leader."),
	}
}

// Collector returns the node's Prometheus metrics (served on /metrics of
// its API address next to the gateway's).
func (n *Node) Collector() prometheus.Collector { return n.metrics }

func (m *nodeMetrics) Describe(ch chan<- *prometheus.Desc) {
	m.commit.Describe(ch)
	for _, d := range []*prometheus.Desc{m.state, m.ready, m.term, m.commitIndex, m.appliedIndex, m.lastIndex,
		m.lastContact, m.peers, m.fsmPending, m.snapshotIndex, m.restores, m.locks, m.lastToken, m.waiters, m.watches,
		m.sessions, m.snapshotSeconds, m.restoreSeconds, m.ops, m.entries} {
		ch <- d
	}
}

func (m *nodeMetrics) Collect(ch chan<- prometheus.Metric) {
	m.commit.Collect(ch)
	n := m.n
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	st := n.raft.State()
	for _, s := range []raft.RaftState{raft.Follower, raft.Candidate, raft.Leader, raft.Shutdown} {
		gauge(m.state, b2f(s == st), s.String())
	}
	gauge(m.ready, b2f(n.sched.isReady()))
	stats := n.raft.Stats()
	num := func(k string) float64 { v, _ := strconv.ParseUint(stats[k], 10, 64); return float64(v) }
	gauge(m.term, num("term"))
	gauge(m.commitIndex, float64(n.raft.CommitIndex()))
	gauge(m.appliedIndex, float64(n.raft.AppliedIndex()))
	gauge(m.lastIndex, float64(n.raft.LastIndex()))
	contact := -1.0
	switch {
	case st == raft.Leader:
		contact = 0
	case !n.raft.LastContact().IsZero():
		contact = time.Since(n.raft.LastContact()).Seconds()
	}
	gauge(m.lastContact, contact)
	gauge(m.peers, num("num_peers"))
	gauge(m.fsmPending, num("fsm_pending"))
	gauge(m.snapshotIndex, num("last_snapshot_index"))
	ch <- prometheus.MustNewConstMetric(m.restores, prometheus.CounterValue, float64(n.restores.Load()))
	gauge(m.locks, float64(n.fsm.NumLocks()))
	gauge(m.lastToken, float64(n.fsm.LastToken()))
	n.sched.mu.Lock()
	w := n.sched.waiters
	n.sched.mu.Unlock()
	gauge(m.waiters, float64(w))
	gauge(m.watches, float64(n.watches.open()))
	gauge(m.sessions, float64(n.fsm.NumSessions()))
	gauge(m.snapshotSeconds, time.Duration(n.snapshotNanos.Load()).Seconds())
	gauge(m.restoreSeconds, time.Duration(n.restoreNanos.Load()).Seconds())
	ch <- prometheus.MustNewConstMetric(m.entries, prometheus.CounterValue, float64(m.entryCount.Load()))
	for t := fsm.OpAcquire; t <= fsm.OpSessionExpire; t++ {
		ch <- prometheus.MustNewConstMetric(m.ops, prometheus.CounterValue, float64(m.opCounts[t].Load()), t.String())
	}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
