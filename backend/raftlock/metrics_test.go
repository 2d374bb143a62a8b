package raftlock

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockgate/lockgate/lock"
)

// TestMetrics: the node's collector passes the pedantic registry's checks
// and reports what the cluster is doing: the leader leads and is ready,
// the lock table's size and last token, a queued waiter, commits observed;
// a follower sees its peers and is in contact with the leader.
func TestMetrics(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var last *lock.Lease
	for _, k := range []string{"m/a", "m/b", "m/c"} {
		var err error
		if last, err = l.Acquire(ctx, k, lock.AcquireOptions{TTL: time.Minute}); err != nil {
			t.Fatal(err)
		}
	}
	go l.NewSession().Acquire(ctx, "m/a", lock.AcquireOptions{TTL: time.Minute}) // waits until ctx ends
	awaitWaiting(t, l, "m/a", 1)
	for _, k := range []string{"m/a", "m/x"} {
		if _, err := l.Watch(ctx, k); err != nil {
			t.Fatal(err)
		}
	}

	lm := gather(t, l)
	for name, want := range map[string]float64{
		`lockgate_raft_state{state="Leader"}`:   1,
		`lockgate_raft_state{state="Follower"}`: 0,
		"lockgate_raft_leader_ready":            1,
		"lockgate_raftlock_locks":               3,
		"lockgate_raftlock_last_token":          float64(last.Token),
		"lockgate_raftlock_waiters":             1,
		"lockgate_raftlock_watches":             2,
		"lockgate_raft_peers":                   2,
		"lockgate_raft_last_contact_seconds":    0,
	} {
		if got, ok := lm[name]; !ok || got != want {
			t.Errorf("leader: %s = %v (present %v), want %v", name, got, ok, want)
		}
	}
	if lm["lockgate_raft_commit_seconds_count"] < 3 {
		t.Errorf("leader observed %v commits, want at least the 3 grants", lm["lockgate_raft_commit_seconds_count"])
	}
	if lm["lockgate_raft_applied_index"] == 0 || lm["lockgate_raft_applied_index"] > lm["lockgate_raft_commit_index"] {
		t.Errorf("leader applied index %v, commit index %v", lm["lockgate_raft_applied_index"], lm["lockgate_raft_commit_index"])
	}

	f := followers(c, l)[0]
	fm := gather(t, f)
	if fm[`lockgate_raft_state{state="Follower"}`] != 1 || fm["lockgate_raft_leader_ready"] != 0 {
		t.Errorf("follower: state %v, ready %v", fm[`lockgate_raft_state{state="Follower"}`], fm["lockgate_raft_leader_ready"])
	}
	if c := fm["lockgate_raft_last_contact_seconds"]; c < 0 || c > 10 {
		t.Errorf("follower's last contact with the leader: %v s", c)
	}
	if fm["lockgate_raft_term"] != lm["lockgate_raft_term"] || fm["lockgate_raft_term"] == 0 {
		t.Errorf("follower term %v, leader term %v", fm["lockgate_raft_term"], lm["lockgate_raft_term"])
	}
}

// gather collects n's metrics through a pedantic registry, keyed by name
// and the non-constant labels, e.g. `lockgate_raft_state{state="Leader"}`;
// a histogram gives NAME_count.
func gather(t *testing.T, n *Node) map[string]float64 {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(n.Collector())
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gathering node %s's metrics: %v", n.ID(), err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			name := mf.GetName()
			for _, lp := range m.GetLabel() {
				if lp.GetName() != "node" {
					name += "{" + lp.GetName() + `="` + lp.GetValue() + `"}`
				} else if lp.GetValue() != n.ID() {
					t.Errorf("%s labelled node=%q on node %s", mf.GetName(), lp.GetValue(), n.ID())
				}
			}
			switch mf.GetType() {
			case dto.MetricType_HISTOGRAM:
				out[name+"_count"] = float64(m.GetHistogram().GetSampleCount())
			case dto.MetricType_COUNTER:
				out[name] = m.GetCounter().GetValue()
			default:
				out[name] = m.GetGauge().GetValue()
			}
		}
	}
	return out
}
