package clients_test

import (
	"slices"
	"strings"
	"testing"
)

// The check that a foreign runner reported every scenario: outputs it must
// accept and outputs it must reject.
func TestUnreported(t *testing.T) {
	set := scenarioSet{Scenarios: []scenario{{Name: "renew"}, {Name: "cancel"}}}
	for _, tc := range []struct {
		name string
		out  []string
		want []string
	}{
		{"both ok", []string{"ok renew 2405ms", "ok cancel 18ms"}, nil},
		{"prefixed by the test runner", []string{"# ok renew 2405ms", "    stdout: ok cancel 3ms"}, nil},
		{"nothing run", []string{"Ran 0 tests", "OK"}, []string{"renew", "cancel"}},
		{"one failed", []string{"ok renew 2405ms", "FAIL cancel: no waiter"}, []string{"cancel"}},
		{"a longer name is not the name", []string{"ok renew-fast 10ms", "ok xcancel 1ms", "ok cancel"}, []string{"renew", "cancel"}},
		{"tap's own ok lines", []string{"ok 1 - renew", "ok 2 - cancel # 12ms"}, []string{"renew", "cancel"}},
	} {
		if got := unreported(set, tc.out); !slices.Equal(got, tc.want) {
			t.Errorf("%s: unreported = %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestSumOps: GET /ops counts lockgate_raftlock_ops_total by its op label
// and nothing else (another metric, a longer name, a sample without op).
func TestSumOps(t *testing.T) {
	page := `# HELP lockgate_raftlock_ops_total Operations.
# TYPE lockgate_raftlock_ops_total counter
lockgate_raftlock_ops_total{op="renew"} 3
lockgate_raftlock_ops_total{node="1",op="session-renew"} 12
lockgate_raftlock_ops_total_created{op="renew"} 1.7e9
lockgate_raftlock_entries_total 40
lockgate_raftlock_ops_total{node="1"} 5
other_ops_total{op="renew"} 100
`
	ops := map[string]float64{"renew": 1}
	if err := sumOps(strings.NewReader(page), ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 || ops["renew"] != 4 || ops["session-renew"] != 12 {
		t.Fatalf("ops %v, want renew 4 (1 + 3), session-renew 12, nothing else", ops)
	}
}
