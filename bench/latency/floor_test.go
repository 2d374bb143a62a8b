package latency

import (
	"context"
	"errors"
	"math"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
)

// TestMeasureFloor measures the two primitives for real (a sync in the
// test's directory, loopback round trips) and checks that every figure is a
// positive, finite, ordered duration, that every sample asked for was taken,
// and that the scratch file is gone afterwards.
func TestMeasureFloor(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	const n = 20
	sh, err := MeasureSync(ctx, dir, n, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	rh, err := MeasureRTT(ctx, n*10, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	for name, st := range map[string]FloorStat{"sync": floorStat(sh), "rtt": floorStat(rh)} {
		if !(st.P50 > 0 && st.P50 <= st.P99) || math.IsInf(st.P99, 0) || math.IsNaN(st.P99) {
			t.Errorf("%s: %+v: want 0 < p50 <= p99, finite", name, st)
		}
	}
	if sh.TotalCount() != n || rh.TotalCount() != n*10 {
		t.Errorf("samples: %d syncs, %d round trips; want %d and %d", sh.TotalCount(), rh.TotalCount(), n, n*10)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Errorf("the scratch file was left behind: %v", left)
	}

	// A zero budget still takes one sample: a run always has a floor.
	if h, err := MeasureSync(ctx, dir, n, 0); err != nil || h.TotalCount() != 1 {
		t.Errorf("zero budget: %v samples, %v; want 1", h.TotalCount(), err)
	}

	// Rounds are summarised as the runs are: medians of the rounds, total
	// samples; every backend gets its floors.
	f := &Floor{Dir: dir}
	for range 3 {
		if err := f.measureRound(ctx); err != nil {
			t.Fatal(err)
		}
	}
	f.summarise(provision.Backends)
	if f.Sync.Samples < 3 || f.RTT.Samples < 3 || !(f.Sync.P50 > 0) || !(f.RTT.P50 > 0) {
		t.Fatalf("summarised floor %+v", f)
	}
	if len(f.Backends) != len(provision.Backends) {
		t.Fatalf("floors for %d backends, want %d", len(f.Backends), len(provision.Backends))
	}
	for _, b := range f.Backends {
		if !(b.CycleUS > 0 && b.HandoffUS > 0 && b.CommitUS >= 0) || math.IsInf(b.CycleUS, 0) {
			t.Errorf("%s: %+v: want positive, finite floors", b.Backend, b)
		}
	}
	t.Logf("sync p50 %.1f µs p99 %.1f µs (%d); rtt p50 %.1f µs p99 %.1f µs (%d); raft cycle %.0f µs",
		f.Sync.P50, f.Sync.P99, f.Sync.Samples, f.RTT.P50, f.RTT.P99, f.RTT.Samples, f.Backends[0].CycleUS)
}

// TestFloorFormula checks each backend's derived floors against the model
// written out independently: a changed formula or model fails here.
func TestFloorFormula(t *testing.T) {
	const sync, rtt = 359.0, 10.0
	want := map[string]struct{ commit, cycle, handoff float64 }{
		// hashicorp/raft: leader sync, then a round trip to a follower
		// that syncs.
		provision.Raft: {2*sync + rtt, 2*(2*sync+rtt) + 2*rtt, (2*sync + rtt) + rtt},
		// etcd: the leader's sync overlaps the follower's round trip.
		provision.Etcd: {sync + rtt, 2*(sync+rtt) + 2*rtt, (sync + rtt) + rtt},
		// PostgreSQL: one WAL flush, nobody to replicate to.
		provision.Postgres: {sync, 2*sync + 2*rtt, sync + rtt},
		// Redis, appendonly no: round trips only.
		provision.Redlock: {0, 2 * rtt, rtt},
	}
	// A peer library pays the commits of the servers it runs on, unless
	// it skips them (pg_advisory_lock writes no WAL).
	want[provision.EtcdMutex], want[provision.Redsync], want[provision.Redislock] = want[provision.Etcd], want[provision.Redlock], want[provision.Redlock]
	want[provision.PGAdvisory] = want[provision.Redlock]
	want[provision.ZooKeeper] = want[provision.Etcd]
	if len(want) != len(provision.Backends) {
		t.Fatalf("the test covers %d backends, there are %d", len(want), len(provision.Backends))
	}
	for _, b := range provision.Backends {
		got := DeriveFloor(b, sync, rtt)
		w := want[b]
		if got.CommitUS != w.commit || got.CycleUS != w.cycle || got.HandoffUS != w.handoff {
			t.Errorf("%s: commit %v cycle %v handoff %v µs; want %v %v %v", b, got.CommitUS, got.CycleUS, got.HandoffUS, w.commit, w.cycle, w.handoff)
		}
		if got.Model.Why == "" {
			t.Errorf("%s: the model does not say why it fits", b)
		}
	}
	// Figures computed by hand: 359 µs sync, 10 µs loopback,
	// a raftlock cycle's floor of about 1.48 ms.
	if c := DeriveFloor(provision.Raft, sync, rtt).CycleUS; c != 1476 {
		t.Errorf("raft cycle floor %v µs, want 1476", c)
	}
}

// TestRunFloor checks every workload's multiples of the floor, on each
// path.
func TestRunFloor(t *testing.T) {
	const sync, rtt = 400.0, 10.0
	f := &Floor{Sync: FloorStat{P50: sync, Samples: 1}, RTT: FloorStat{P50: rtt, Samples: 1}}
	f.Backends = []BackendFloor{DeriveFloor(provision.Raft, sync, rtt), DeriveFloor(provision.Postgres, sync, rtt)}
	raftCycle := 2*(2*sync+rtt) + 2*rtt      // 1660
	raftHandoff := (2*sync + rtt) + rtt      // 820
	pgGatewayCycle := 2*sync + 2*rtt + 2*rtt // 840: the gateway's hop
	pgGatewayHandoff := sync + rtt + rtt     // 420
	run := func(backend, via, workload string, clients int, p50, ops float64) *Run {
		return &Run{Backend: backend, Via: via, Workload: workload, Clients: clients, OpsPerSec: ops, LatencyUS: report.Percentiles{P50: p50}}
	}
	for _, c := range []struct {
		r            *Run
		latency, ops float64 // the floor's
		p50x, opsx   float64
	}{
		{run(provision.Raft, provision.Direct, Sequential, 1, 2*raftCycle, 1e6/(3*raftCycle)), raftCycle, 1e6 / raftCycle, 2, 3},
		// Little's law: 32 clients at the floor would do 32/cycle.
		{run(provision.Raft, provision.Direct, Parallel, 32, 4*raftCycle, 32e6/(5*raftCycle)), raftCycle, 32e6 / raftCycle, 4, 5},
		// One key: an acquisition per handoff at best.
		{run(provision.Raft, provision.Direct, Contended, 32, 32*raftHandoff, 1e6/(1.5*raftHandoff)), raftCycle, 1e6 / raftHandoff, 32 * raftHandoff / raftCycle, 1.5},
		{run(provision.Raft, provision.Direct, Handoff, 32, 2*raftHandoff, 1e6/(2*raftHandoff)), raftHandoff, 1e6 / raftHandoff, 2, 2},
		// raftlock's nodes serve the gateway protocol: no extra hop.
		{run(provision.Raft, provision.Gateway, Sequential, 1, raftCycle, 1e6/raftCycle), raftCycle, 1e6 / raftCycle, 1, 1},
		{run(provision.Postgres, provision.Gateway, Sequential, 1, 3*pgGatewayCycle, 1e6/pgGatewayCycle), pgGatewayCycle, 1e6 / pgGatewayCycle, 3, 1},
		{run(provision.Postgres, provision.Gateway, Handoff, 4, pgGatewayHandoff, 1e6/pgGatewayHandoff), pgGatewayHandoff, 1e6 / pgGatewayHandoff, 1, 1},
	} {
		got := f.RunFloor(c.r)
		name := c.r.Backend + "/" + c.r.Via + "/" + c.r.Workload
		if got == nil {
			t.Fatalf("%s: no floor", name)
		}
		if !near(got.LatencyUS, c.latency) || !near(got.OpsPerSec, c.ops) || !near(got.P50X, c.p50x) || !near(got.OpsX, c.opsx) {
			t.Errorf("%s: %+v; want latency %v ops/s %v p50× %v ops× %v", name, *got, c.latency, c.ops, c.p50x, c.opsx)
		}
	}
	if got := f.RunFloor(run(provision.Etcd, provision.Direct, Sequential, 1, 1000, 1000)); got != nil {
		t.Errorf("a backend without a derived floor got %+v", got)
	}
	if got := (*Floor)(nil).RunFloor(run(provision.Raft, provision.Direct, Sequential, 1, 1000, 1000)); got != nil {
		t.Errorf("no floor at all gave %+v", got)
	}
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*max(math.Abs(a), math.Abs(b), 1) }

// TestMeasureFloorErrors: a directory that does not exist, and a cancelled
// context, fail with errors a caller can match.
func TestMeasureFloorErrors(t *testing.T) {
	if _, err := MeasureSync(context.Background(), filepath.Join(t.TempDir(), "missing"), 1, time.Second); !errors.Is(err, ErrFloor) || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing dir: %v; want ErrFloor and os.ErrNotExist", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := MeasureSync(ctx, t.TempDir(), 10, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled sync: %v; want context.Canceled", err)
	}
	if _, err := MeasureRTT(ctx, 10, time.Second); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled round trips: %v; want context.Canceled", err)
	}
}
