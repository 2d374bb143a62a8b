package soak

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/internal/benchtest"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/testenv"
)

// TestSoakSmoke runs the real soak for 30 s on a three-node cluster of
// lockgate node processes, with a fault every 4 to 7 s: every node is
// sampled, every metric read, every kind of churn happens, the faults are
// injected and healed, every node × metric gets a verdict, and the JSON
// holds the samples. Thirty seconds extrapolated to an hour says nothing
// of growth, so the growth verdicts are not asserted here; the judging is
// exercised on the run's real samples instead: under a cap below what a
// node's log occupies, every node fails, by name.
func TestSoakSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a cluster")
	}
	bin := testenv.BuildLockgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var log bytes.Buffer
	cfg := Config{Backend: provision.Raft, Lockgate: bin, Duration: 30 * time.Second, Warmup: 5 * time.Second,
		Settle: 2 * time.Second, SampleEvery: time.Second, Clients: 6, Keys: 2, TTL: 2 * time.Second,
		Faults: DefaultFaults, FaultMin: 4 * time.Second, FaultMax: 7 * time.Second, Seed: 7,
		Log: &log, Progress: benchtest.Writer(t)}
	rep, err := Run(ctx, cfg)
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, log.String())
	}
	benchtest.LogTable(t, rep)

	if len(rep.Nodes) != provision.RaftNodes {
		t.Fatalf("nodes %v", rep.Nodes)
	}
	// Every node sampled about every second, with every metric read at
	// least once (a paused or killed node misses some rounds).
	for _, node := range rep.Nodes {
		seen := map[string]bool{}
		n := 0
		for _, s := range rep.Samples {
			if s.Node != node {
				continue
			}
			n++
			for m, v := range s.Values {
				if v > 0 || m == SnapshotBytes || m == LogEntries {
					seen[m] = true
				}
			}
		}
		if n < 20 {
			t.Errorf("node %s: %d samples in 30 s at 1 s", node, n)
		}
		for _, m := range Metrics {
			if !seen[m] {
				t.Errorf("node %s: %s never read (or always 0)", node, m)
			}
		}
	}
	c := rep.Counts
	for what, n := range map[string]int64{"acquired": c.Acquired, "released": c.Released, "sessions opened": c.SessionsOpened,
		"sessions closed or abandoned": c.SessionsClosed + c.SessionsAbandoned, "watches": c.WatchesOpened,
		"connections closed": c.ConnsClosed} {
		if n == 0 {
			t.Errorf("no %s: %+v", what, c)
		}
	}
	if c.ConnsOpened <= int64(cfg.Clients) {
		t.Errorf("%d connections opened by %d clients: no connection churn", c.ConnsOpened, cfg.Clients)
	}
	if len(rep.FaultEvents) < 2 {
		t.Errorf("%d faults in 30 s at one per 4-7 s", len(rep.FaultEvents))
	}
	for _, ev := range rep.FaultEvents {
		if ev.Err != "" {
			t.Errorf("fault %s at %.0fs: %s", ev.Name, ev.At, ev.Err)
		}
	}
	// Every node's every metric, and the cluster's total of the two that
	// follow the connections.
	if want := len(rep.Nodes)*len(Metrics) + 2; len(rep.Verdicts) != want {
		t.Errorf("%d verdicts, want %d", len(rep.Verdicts), want)
	}
	for _, v := range rep.Verdicts {
		if v.Fit.Points < minFitPoints {
			t.Errorf("node %s %s: fitted over %d points", v.Node, v.Metric, v.Fit.Points)
		}
		if v.Bound.Cap && !v.Pass {
			t.Errorf("node %s %s: %s", v.Node, v.Metric, v.Why)
		}
	}

	var back Report
	var js bytes.Buffer
	if err := rep.WriteJSON(&js); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(js.Bytes(), &back); err != nil || len(back.Samples) != len(rep.Samples) || len(back.Verdicts) != len(rep.Verdicts) {
		t.Errorf("JSON round trip: %v, %d samples of %d", err, len(back.Samples), len(rep.Samples))
	}

	// The same samples under a log cap of 4 KiB: every node fails, named.
	tight := &Report{Nodes: rep.Nodes, Samples: rep.Samples, Counts: rep.Counts, Bounds: map[string]Bound{}}
	for m, b := range rep.Bounds {
		tight.Bounds[m] = b
	}
	tight.Bounds[LogBytes] = Bound{Cap: true, Abs: 4 << 10}
	tight.judge(cfg)
	for _, node := range rep.Nodes {
		want := "node " + node + " " + LogBytes + ": reached"
		if !strings.Contains(strings.Join(tight.Failed(), "\n"), want) {
			t.Errorf("under a 4 KiB log cap, no %q in %q", want, tight.Failed())
		}
	}
}

// TestRunRefuses: settings the soak cannot run with are refused before
// anything starts.
func TestRunRefuses(t *testing.T) {
	base := Config{Backend: provision.Raft, Duration: time.Minute, SampleEvery: time.Second, TTL: time.Second, Clients: 4, Keys: 1}
	for name, mod := range map[string]func(*Config){
		"backend":    func(c *Config) { c.Backend = provision.Etcd },
		"fault":      func(c *Config) { c.Faults = []string{"no-such-fault"} },
		"fault-gap":  func(c *Config) { c.Faults = []string{faults.Kill} },
		"metric":     func(c *Config) { c.Bounds = map[string]Bound{"cpu": {Abs: 1}} },
		"cap-growth": func(c *Config) { c.Bounds = map[string]Bound{LogBytes: {Frac: 0.1}} },
		"clients":    func(c *Config) { c.Clients = 2 },
	} {
		cfg := base
		mod(&cfg)
		if _, err := Run(context.Background(), cfg); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}
