package console

import (
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// The figures of the page's sparklines. Grants, waiters and commits happen
// on the leader (a follower redirects its clients there), so a node's own
// metrics say nothing of the cluster's load unless it leads: the page
// reads the leader's figures, which the node it is served from fetches
// as it fetches the members' status (the caller's credential, 1 s), and
// labels them with the node they come from. The node's own gateway
// figures are shown beside them as local.

// Paths of the figures.
const (
	// pathMetrics is what the page reads: the leader's figures and the
	// answering node's own.
	pathMetrics = PathData + "metrics"
	// pathNodeMetrics is one node's own figures, which a follower asks
	// of the leader.
	pathNodeMetrics = PathData + "metrics/node"
)

// Rate windows: a rate is taken against the newest sample at least
// rateWindow old (else the oldest one at least minWindow old); samples
// are kept sampleEvery apart, for keepSamples.
const (
	rateWindow  = time.Second
	minWindow   = 100 * time.Millisecond
	sampleEvery = 200 * time.Millisecond
	keepSamples = 5 * time.Second
)

// The metrics the figures are taken from (backend/raftlock/metrics.go,
// gateway/metrics.go). The raftlock series carry a node label.
const (
	metricOps            = "lockgate_raftlock_ops_total" // {op="acquire"}: grants committed as leader
	metricWaiters        = "lockgate_raftlock_waiters"
	metricCommit         = "lockgate_raft_commit_seconds"
	metricGatewayGrants  = "lockgate_grants_total"
	metricGatewayWaiters = "lockgate_waiters"
)

// nodeFigures is one node's figures; a nil field has no value (no
// metric, or no window to take a rate over yet).
type nodeFigures struct {
	Node  string `json:"node"`
	State string `json:"state"`
	// GrantsPerSec are the grants this node committed as leader, per
	// second; Waiters the acquires queued on it (the leader's); CommitMs
	// the mean time to commit a batch (leader only).
	GrantsPerSec *float64 `json:"grantsPerSec"`
	Waiters      *float64 `json:"waiters"`
	CommitMs     *float64 `json:"commitMs"`
	// GatewayGrantsPerSec and GatewayWaiters are the grants and waiting
	// acquires of clients connected to this node's gateway.
	GatewayGrantsPerSec *float64 `json:"gatewayGrantsPerSec"`
	GatewayWaiters      *float64 `json:"gatewayWaiters"`
	// WindowMs is the time the rates are taken over (0: none yet).
	WindowMs float64 `json:"windowMs"`
}

// metricsReply is what the page reads: Cluster the leader's figures (nil
// with ClusterError saying why: no leader known, or it did not answer),
// Local the answering node's own.
type metricsReply struct {
	Node         string       `json:"node"`
	LeaderID     string       `json:"leaderId"`
	Cluster      *nodeFigures `json:"cluster"`
	ClusterError string       `json:"clusterError,omitempty"`
	Local        nodeFigures  `json:"local"`
}

// counters is one reading of the node's metrics.
type counters struct {
	at                             time.Time
	grants, commitSum, commitCount *float64
	waiters                        *float64
	gwGrants, gwWaiters            *float64
}

// sampler keeps recent readings of the node's metrics, taken as the
// figures are asked for (no goroutine of its own), to take rates over.
type sampler struct {
	mu      sync.Mutex
	samples []counters // oldest first
}

// figures returns the node's figures now.
func (c *Console) figures() nodeFigures {
	f := nodeFigures{Node: c.n.ID(), State: c.n.StatusView().State}
	if c.gatherer == nil {
		return f
	}
	cur := c.read(time.Now())
	f.Waiters, f.GatewayWaiters = cur.waiters, cur.gwWaiters
	prev, ok := c.sampler.add(cur)
	if !ok {
		return f
	}
	secs := cur.at.Sub(prev.at).Seconds()
	f.WindowMs = secs * 1000
	f.GrantsPerSec = rate(prev.grants, cur.grants, secs)
	f.GatewayGrantsPerSec = rate(prev.gwGrants, cur.gwGrants, secs)
	if prev.commitSum != nil && cur.commitSum != nil && prev.commitCount != nil && cur.commitCount != nil {
		if dc, ds := *cur.commitCount-*prev.commitCount, *cur.commitSum-*prev.commitSum; dc > 0 && ds >= 0 {
			ms := ds / dc * 1000
			f.CommitMs = &ms
		}
	}
	return f
}

// add records cur (at most one sample per sampleEvery) and returns the
// sample to take rates against, if there is one.
func (s *sampler) add(cur counters) (counters, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for len(s.samples) > 1 && cur.at.Sub(s.samples[1].at) > keepSamples {
		s.samples = s.samples[1:]
	}
	var prev counters
	ok := false
	for i := len(s.samples) - 1; i >= 0; i-- {
		if d := cur.at.Sub(s.samples[i].at); d >= rateWindow {
			prev, ok = s.samples[i], true
			break
		}
	}
	if !ok && len(s.samples) > 0 && cur.at.Sub(s.samples[0].at) >= minWindow {
		prev, ok = s.samples[0], true
	}
	if n := len(s.samples); n == 0 || cur.at.Sub(s.samples[n-1].at) >= sampleEvery {
		s.samples = append(s.samples, cur)
	}
	return prev, ok
}

// rate is a counter's increase per second; nil when a reading is missing
// or the counter went down (a restart).
func rate(prev, cur *float64, secs float64) *float64 {
	if prev == nil || cur == nil || secs <= 0 || *cur < *prev {
		return nil
	}
	r := (*cur - *prev) / secs
	return &r
}

// read takes one reading of the node's metrics: the raftlock series of
// this node (node label) and the gateway's.
func (c *Console) read(at time.Time) counters {
	r := counters{at: at}
	mfs, err := c.gatherer.Gather()
	if err != nil && len(mfs) == 0 {
		c.log.Debug("console: gathering metrics", "err", err)
		return r
	}
	self := c.n.ID()
	add := func(p **float64, v float64) {
		if *p == nil {
			*p = new(float64)
		}
		**p += v
	}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = lp.GetValue()
			}
			mine := labels["node"] == self
			switch mf.GetName() {
			case metricOps:
				if mine && labels["op"] == "acquire" {
					add(&r.grants, m.GetCounter().GetValue())
				}
			case metricWaiters:
				if mine {
					add(&r.waiters, m.GetGauge().GetValue())
				}
			case metricCommit:
				if mine && m.GetHistogram() != nil {
					add(&r.commitSum, m.GetHistogram().GetSampleSum())
					add(&r.commitCount, float64(m.GetHistogram().GetSampleCount()))
				}
			case metricGatewayGrants:
				add(&r.gwGrants, m.GetCounter().GetValue())
			case metricGatewayWaiters:
				add(&r.gwWaiters, m.GetGauge().GetValue())
			}
		}
	}
	return r
}

// nodeMetrics answers this node's own figures (what a follower asks of
// the leader).
func (c *Console) nodeMetrics(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	writeJSON(w, http.StatusOK, c.figures())
}

// metrics answers the page's figures: the leader's (fetched when this
// node follows) and this node's own.
func (c *Console) metrics(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	rep := metricsReply{Node: c.n.ID(), Local: c.figures()}
	if c.n.IsLeader() {
		rep.LeaderID = rep.Node
		cl := rep.Local
		rep.Cluster = &cl
		writeJSON(w, http.StatusOK, rep)
		return
	}
	id, addr := c.n.Leader()
	rep.LeaderID = id
	switch {
	case id == "":
		rep.ClusterError = "no leader known: the cluster's figures are the leader's"
	case addr == "":
		rep.ClusterError = "the leader " + id + "'s API address is not known yet"
	default:
		f, err := c.leaderFigures(r, addr)
		switch {
		case err != nil:
			rep.ClusterError = fmt.Sprintf("the leader %s did not answer: %v", id, err)
		case f.Node != id || f.State != "leader":
			rep.ClusterError = fmt.Sprintf("%s at %s answered as %s (%s), not as the leader", id, addr, f.Node, f.State)
		default:
			rep.Cluster = &f
		}
	}
	writeJSON(w, http.StatusOK, rep)
}

// leaderFigures asks the leader at apiAddr for its own figures, with the
// caller's credential (the leader checks it as this node does).
func (c *Console) leaderFigures(r *http.Request, apiAddr string) (nodeFigures, error) {
	f, err := askMember[nodeFigures](c, r, apiAddr, pathNodeMetrics, 16<<10)
	if err != nil {
		return f, err
	}
	if f.Node == "" {
		return f, errors.New(apiAddr + " named no node")
	}
	return f, nil
}
