package matrix

import (
	"bytes"
	"context"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/internal/benchtest"
	"github.com/lockgate/lockgate/bench/latency"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
)

// TestPeersSmoke measures every peer library beside the backend of ours on
// the same servers, in one run: every run made progress and states its
// mode and guarantees, ours is set beside each of its peers as ratios, and
// the HTML report shows the modes and the comparisons.
func TestPeersSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts redis, postgres, etcd and zookeeper")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	names := []string{provision.Etcd, provision.EtcdMutex, "redlock:single", provision.Redsync, provision.Redislock, provision.PGAdvisory, provision.ZooKeeper}
	s := benchtest.Provision(t, ctx, names, provision.ProvisionOptions{})
	defer s.Close()
	rep, err := latency.RunLatency(ctx, s, latency.LatencyConfig{
		Backends:  names,
		Workloads: []string{latency.Sequential, latency.Contended},
		Clients:   4,
		Duration:  time.Second,
		Rounds:    1,
		Progress:  benchtest.Writer(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	benchtest.LogTable(t, rep)
	for _, r := range rep.Runs {
		if r.Ops == 0 || r.Errors != 0 || r.Mode == "" || r.Variant == "" {
			t.Errorf("%s %s: ops %d, errors %d %v, variant %q, mode %q", r.Backend, r.Workload, r.Ops, r.Errors, r.ErrorKinds, r.Variant, r.Mode)
		}
		if isPeer := r.PeerOf != ""; isPeer == slices.Contains(provision.Ours, provision.InfoOf(r.Backend).Name) {
			t.Errorf("%s: peer of %q", r.Backend, r.PeerOf)
		}
	}
	// The caps the report shows are what the libraries offer.
	caps := map[string]provision.Caps{}
	for _, r := range rep.Runs {
		caps[r.Backend] = r.Caps
	}
	if caps[provision.Redsync].Fencing || caps[provision.Redislock].Fencing || caps[provision.PGAdvisory].TTL || !caps[provision.ZooKeeper].Fencing || !caps[provision.EtcdMutex].Session {
		t.Errorf("caps %+v", caps)
	}
	// etcd beside etcd-mutex and zookeeper (the recipe it implements), and
	// beside nothing of redis's.
	pairs := map[string]bool{}
	for _, c := range rep.Comparisons {
		pairs[c.Ours+"/"+c.Peer+"/"+c.Workload] = true
		if !(c.P50Ratio > 0 && c.OpsRatio > 0) {
			t.Errorf("comparison %+v: want positive ratios", c)
		}
	}
	for _, want := range []string{"etcd/etcd-mutex/sequential", "etcd/zookeeper/contended"} {
		if !pairs[want] {
			t.Errorf("no comparison %s in %v", want, pairs)
		}
	}
	if pairs["etcd/redsync/sequential"] {
		t.Error("etcd compared with redsync, a peer of redlock")
	}
	page := filepath.Join(t.TempDir(), "peers.html")
	if err := report.WriteFile(page, rep.WriteHTML); err != nil {
		t.Fatal(err)
	}
	dom := benchtest.DumpDOM(t, page)
	for _, want := range []string{`id="modes"`, `id="comparisons"`, "<td>no-fencing", "<td>pg-advisory</td>"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the HTML report has no %s", want)
		}
	}
}

// TestMatrixSmoke runs the matrix on two peers and two faults, briefly, and
// renders its one-page report: the grid has a cell per backend × fault,
// the decision table a row per backend, and a lease lock under a client
// pause loses mutual exclusion (the known limit of leases) while one
// without a TTL does not.
func TestMatrixSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("fault campaigns")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cfg := ShortMatrix()
	cfg.Backends = []string{provision.Redislock, provision.PGAdvisory}
	cfg.Faults = []string{faults.ClientPause, faults.Clock}
	cfg.Latency.Duration = 500 * time.Millisecond
	cfg.Latency.Clients = 2
	cfg.Progress = benchtest.Writer(t)
	var log bytes.Buffer
	cfg.Log = &log
	rep, err := RunMatrix(ctx, cfg)
	if err != nil {
		t.Fatalf("%v\n%s", err, log.String())
	}
	benchtest.LogTable(t, rep)
	if len(rep.Cells) != 4 || len(rep.Decisions) != 2 {
		t.Fatalf("%d cells, %d decisions: want 4 and 2", len(rep.Cells), len(rep.Decisions))
	}
	for _, c := range rep.Cells {
		switch {
		case c.Skipped != "":
			t.Errorf("%s under %s skipped: %s", c.Backend, c.Fault, c.Skipped)
		case c.Cycles == 0 || c.Injected == 0:
			t.Errorf("%s under %s: %s", c.Backend, c.Fault, c.text())
		case !c.Valid && c.Fault == faults.ClientPause:
			// The armed pause stalls a holder past its TTL every time; a
			// single clock jump in an 8 s smoke breaks a lease only if one
			// is held across it and taken over in time (missed once beside
			// a second test suite), so its cell may come out invalid here.
			t.Errorf("%s under %s: %s", c.Backend, c.Fault, c.text())
		case c.Backend == provision.Redislock && c.Fault == faults.ClientPause && c.Overlaps == 0:
			t.Errorf("redislock under a client pause: no overlap; a lease without fencing must show one")
		case c.Backend == provision.PGAdvisory && c.Overlaps != 0:
			t.Errorf("pg-advisory under %s: %d overlaps", c.Fault, c.Overlaps)
		}
	}
	page := filepath.Join(t.TempDir(), "matrix.html")
	if err := report.WriteFile(page, rep.WriteHTML); err != nil {
		t.Fatal(err)
	}
	benchtest.CheckRenders(t, page)
	dom := benchtest.DumpDOM(t, page)
	for _, want := range []string{`id="grid"`, `id="decisions"`, "fit for efficiency only"} {
		if !strings.Contains(dom, want) {
			t.Errorf("the matrix report has no %s", want)
		}
	}
}
