package clients_test

import (
	"slices"
	"testing"
)

// The check that a foreign runner reported every scenario: outputs it must
// accept and outputs it must reject.
func TestUnreported(t *testing.T) {
	set := scenarioSet{Version: 1, Scenarios: []scenario{{Name: "renew"}, {Name: "cancel"}}}
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
