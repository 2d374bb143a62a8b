package benchcli

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/bench/latency"
	"github.com/lockgate/lockgate/bench/report"
)

// writeLatency writes a latency report of raft beside etcd-mutex whose
// p50 ratio is p50Ratio, as --json does, and returns its path.
func writeLatency(t *testing.T, name string, p50Ratio float64) string {
	t.Helper()
	rep := &latency.Report{
		Runs: []*latency.Run{{Backend: "raft", Via: "direct", Cache: latency.CacheOff, Workload: latency.Sequential, Ops: 10}},
		Comparisons: []latency.Comparison{{Workload: latency.Sequential, Via: "direct", Cache: latency.CacheOff,
			Ours: "raft", Peer: "etcd-mutex", P50Ratio: p50Ratio, OpsRatio: 2}},
	}
	path := filepath.Join(t.TempDir(), name)
	if err := report.WriteFile(path, rep.WriteJSON); err != nil {
		t.Fatal(err)
	}
	return path
}

// compare exits 0 when no figure got worse beyond the margin, 1 when one
// did, and refuses a margin that is not a fraction.
func TestBenchCompare(t *testing.T) {
	old := writeLatency(t, "old.json", 0.5)
	same, worse := writeLatency(t, "same.json", 0.55), writeLatency(t, "worse.json", 0.6)

	code, out, errOut := run(t, "compare", old, same)
	if code != 0 || !strings.Contains(out, "p50 ratio") || !strings.Contains(out, "0 worse by more than 15%") {
		t.Errorf("compare within the margin: exit %d\n%s%s", code, out, errOut)
	}
	code, out, errOut = run(t, "compare", old, worse)
	if code != 1 || !strings.Contains(out, "WORSE") || !strings.Contains(errOut, "worse by more than 15%") {
		t.Errorf("compare beyond the margin: exit %d\n%s%s", code, out, errOut)
	}
	if code, _, _ = run(t, "compare", "--margin", "0.25", old, worse); code != 0 {
		t.Errorf("compare --margin 0.25 (20%% worse): exit %d, want 0", code)
	}
	if code, _, errOut = run(t, "compare", "--margin", "1.5", old, worse); code == 0 || !strings.Contains(errOut, "margin") {
		t.Errorf("--margin 1.5: exit %d %q", code, errOut)
	}
	if code, _, _ = run(t, "latency", "--compare", filepath.Join(t.TempDir(), "missing.json")); code == 0 {
		t.Error("latency --compare with a missing file did not fail before the run")
	}
}
