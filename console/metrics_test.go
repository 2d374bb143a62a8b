package console_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/lock"
)

// figures is a node's figures as /v1/console/metrics answers them.
type figures struct {
	Node, State                         string
	GrantsPerSec, Waiters, CommitMs     *float64
	GatewayGrantsPerSec, GatewayWaiters *float64
	WindowMs                            float64
}

type metricsView struct {
	Node, LeaderID, ClusterError string
	Cluster                      *figures
	Local                        figures
}

func readMetrics(t *testing.T, s *raftlock.Server, token string) metricsView {
	t.Helper()
	a := call(t, "GET", api(s, "/v1/console/metrics"), token, "")
	if a.status != 200 {
		t.Fatalf("GET /v1/console/metrics on %s: %d %s", s.ID(), a.status, a.raw)
	}
	var v metricsView
	if err := json.Unmarshal([]byte(a.raw), &v); err != nil {
		t.Fatalf("GET /v1/console/metrics: %v: %s", err, a.raw)
	}
	return v
}

// TestFollowerShowsClusterFigures: the sparklines' figures on a follower's
// console are the leader's — while clients acquire, a non-zero grant rate
// and a commit latency, labelled with the leader — and the follower's own
// are apart, as its own; with no leader left, the figures say so instead
// of showing zeros. The endpoints need a credential.
func TestFollowerShowsClusterFigures(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	for _, path := range []string{"/v1/console/metrics", "/v1/console/metrics/node"} {
		for _, tok := range []string{"", "wrong-token-0123456789abcdef"} {
			if a := call(t, "GET", api(f, path), tok, ""); a.status != 401 || a.code() != "unauthorized" {
				t.Errorf("GET %s with token %q: %d %s, want 401 unauthorized", path, tok, a.status, a.raw)
			}
		}
	}

	// Clients acquire and release on the leader until the test ends.
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for i := range 4 {
		wg.Go(func() {
			key := "figures/k" + string(rune('a'+i))
			for ctx.Err() == nil {
				h, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second, Owner: "load"})
				if err != nil {
					continue
				}
				l.Release(context.Background(), h)
			}
		})
	}

	var v metricsView
	deadline := time.Now().Add(20 * time.Second)
	tick := time.NewTicker(50 * time.Millisecond) // polled over HTTP: the figures are rates over a window
	defer tick.Stop()
	for {
		v = readMetrics(t, f, clientToken)
		if cl := v.Cluster; cl != nil && cl.GrantsPerSec != nil && *cl.GrantsPerSec > 0 && cl.CommitMs != nil && *cl.CommitMs > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the follower's figures never showed the cluster's grants and commit latency: %+v (cluster %+v)", v, v.Cluster)
		}
		<-tick.C
	}
	cl := v.Cluster
	t.Logf("follower %s shows %.0f grants/s, commit %.2f ms, from %s (%s) over %.0f ms", v.Node, *cl.GrantsPerSec, *cl.CommitMs, cl.Node, cl.State, cl.WindowMs)
	if v.Node != f.ID() || v.LeaderID != l.ID() || cl.Node != l.ID() || cl.State != "leader" || v.ClusterError != "" {
		t.Errorf("figures %+v from %+v: want node %s, from the leader %s", v, cl, f.ID(), l.ID())
	}
	if cl.Waiters == nil {
		t.Errorf("the leader's figures have no waiters: %+v", cl)
	}
	// The follower's own figures are its own: it committed nothing.
	if v.Local.Node != f.ID() || v.Local.State != "follower" || v.Local.CommitMs != nil ||
		(v.Local.GrantsPerSec != nil && *v.Local.GrantsPerSec != 0) {
		t.Errorf("local figures %+v: want the follower's own (no grants, no commits)", v.Local)
	}
	// An admin token reads them too.
	if a := readMetrics(t, f, adminToken); a.Node != f.ID() {
		t.Errorf("with the admin token: %+v", a)
	}
	cancel()
	wg.Wait()

	// No leader: the figures say so, with no numbers.
	for _, s := range c.Servers {
		if s != f {
			s.Shutdown()
		}
	}
	deadline = time.Now().Add(20 * time.Second)
	for {
		v = readMetrics(t, f, clientToken)
		if strings.Contains(v.ClusterError, "no leader known") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("with no leader left, the figures say %+v (cluster %+v), want no leader known", v, v.Cluster)
		}
		<-tick.C
	}
	if v.Cluster != nil || v.LeaderID != "" {
		t.Errorf("no leader, yet figures %+v from %q", v.Cluster, v.LeaderID)
	}
}
