package latency

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/bench/report"
)

// regressReport is a report of raft beside etcd-mutex on one workload,
// with the figures CompareReports reads.
func regressReport(p50Ratio, opsRatio, p50X, serverUS float64) *Report {
	run := func(backend, variant, peerOf string) *Run {
		return &Run{Backend: backend, Variant: variant, PeerOf: peerOf, Via: "direct", Cache: CacheOff, Workload: Sequential,
			Ops: 100, OpsPerSec: 50, LatencyUS: report.Percentiles{P50: 1000},
			Floor: &RunFloor{LatencyUS: 500, P50X: p50X, OpsX: 2 * p50X},
			Resources: &Resources{Servers: &ServerResources{CPUPerOpUS: serverUS, Leader: &LeaderResources{CPUPerOpUS: serverUS / 2}},
				Client: &ProcResources{CPUPerOpUS: 100}, AllCPUPerOpUS: serverUS + 100}}
	}
	return &Report{
		Runs: []*Run{run("raft", "cluster", ""), run("etcd-mutex", "session", "etcd")},
		Comparisons: []Comparison{{Workload: Sequential, Via: "direct", Cache: CacheOff, Ours: "raft", Peer: "etcd-mutex",
			P50Ratio: p50Ratio, OpsRatio: opsRatio}},
	}
}

// saveLoad writes rep as --json does and reads it back, as compare does.
func saveLoad(t *testing.T, rep *Report) *Report {
	t.Helper()
	path := filepath.Join(t.TempDir(), "r.json")
	if err := report.WriteFile(path, rep.WriteJSON); err != nil {
		t.Fatal(err)
	}
	got, err := LoadReport(path)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

func TestCompareReports(t *testing.T) {
	old := saveLoad(t, regressReport(0.50, 2.0, 1.6, 1000))
	for _, tc := range []struct {
		name string
		cur  *Report
		fail []string // the figures that must fail, "of | figure"
	}{
		{"same", regressReport(0.50, 2.0, 1.6, 1000), nil},
		// Within the margin either way, and better by far: passes.
		{"within margin", regressReport(0.56, 1.75, 1.8, 1140), nil},
		{"better", regressReport(0.30, 4.0, 1.1, 500), nil},
		// A p50 ratio up 20 %: lower is better, so it fails.
		{"p50 ratio worse", regressReport(0.60, 2.0, 1.6, 1000), []string{"raft over etcd-mutex, sequential via direct, cache off | p50 ratio"}},
		// The ops ratio down 20 %: higher is better, so it fails; up 20 % would not.
		{"ops ratio worse", regressReport(0.50, 1.6, 1.6, 1000), []string{"raft over etcd-mutex, sequential via direct, cache off | ops ratio"}},
		// CPU per op up 20 % on both runs: server and leader fail, all (up 18.2 %) too.
		{"cpu worse", regressReport(0.50, 2.0, 1.6, 1200), []string{
			"raft:cluster via direct, cache off, sequential | server µs/op",
			"raft:cluster via direct, cache off, sequential | leader µs/op",
			"raft:cluster via direct, cache off, sequential | all µs/op",
			"etcd-mutex:session via direct, cache off, sequential | server µs/op",
			"etcd-mutex:session via direct, cache off, sequential | leader µs/op",
			"etcd-mutex:session via direct, cache off, sequential | all µs/op",
		}},
		{"floor worse", regressReport(0.50, 2.0, 2.0, 1000), []string{
			"raft:cluster via direct, cache off, sequential | p50 × floor",
			"raft:cluster via direct, cache off, sequential | ops × floor",
			"etcd-mutex:session via direct, cache off, sequential | p50 × floor",
			"etcd-mutex:session via direct, cache off, sequential | ops × floor",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, err := CompareReports(old, saveLoad(t, tc.cur), DefaultMargin)
			if err != nil {
				t.Fatal(err)
			}
			if len(g.Rows) != 2+2*6 {
				t.Errorf("%d rows compared, want 14 (the comparison's two, six per run)", len(g.Rows))
			}
			var failed []string
			for _, r := range g.Failed() {
				failed = append(failed, r.Of+" | "+r.Figure)
			}
			if strings.Join(failed, "\n") != strings.Join(tc.fail, "\n") {
				t.Errorf("failed:\n%s\nwant:\n%s", strings.Join(failed, "\n"), strings.Join(tc.fail, "\n"))
			}
			if (g.Err() != nil) != (len(tc.fail) > 0) {
				t.Errorf("Err() = %v with %d failures", g.Err(), len(tc.fail))
			}
			var b strings.Builder
			if err := g.WriteTable(&b); err != nil {
				t.Fatal(err)
			}
			if len(tc.fail) > 0 && !strings.Contains(b.String(), "WORSE") {
				t.Errorf("the table marks nothing WORSE:\n%s", b.String())
			}
		})
	}
}

// Figures in only one report are listed, not failed; a report from before
// comparisons named their cache compares as cache off.
func TestCompareReportsOneSided(t *testing.T) {
	old := regressReport(0.50, 2.0, 1.6, 1000)
	old.Comparisons[0].Cache = ""
	old.Runs[1].Resources = nil // an old report without resources
	cur := regressReport(0.50, 2.0, 1.6, 1000)
	cur.Runs = append(cur.Runs, &Run{Backend: "redsync", Via: "direct", Cache: CacheOff, Workload: Sequential,
		Floor: &RunFloor{P50X: 9, OpsX: 9}})
	g, err := CompareReports(saveLoad(t, old), saveLoad(t, cur), DefaultMargin)
	if err != nil {
		t.Fatal(err)
	}
	if g.Err() != nil || len(g.OnlyOld) != 0 {
		t.Errorf("err %v, only old %v", g.Err(), g.OnlyOld)
	}
	if len(g.Rows) != 2+2*2+4 {
		t.Errorf("%d rows, want 10 (the comparison's two, the floors, raft's resources)", len(g.Rows))
	}
	// etcd-mutex's four resource figures and redsync's two floor figures.
	if len(g.OnlyNew) != 6 {
		t.Errorf("only new: %v", g.OnlyNew)
	}
	if _, err := CompareReports(old, cur, 1); err == nil {
		t.Error("a margin of 1 was taken")
	}
}

func TestLoadReportRefusesOther(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.json")
	if err := os.WriteFile(path, []byte(`{"campaign": 1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadReport(path); err == nil {
		t.Error("a file with no runs loaded as a latency report")
	}
}
