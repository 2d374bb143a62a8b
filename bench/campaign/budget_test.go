package campaign

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestChaosUncheckedKeyFails: a campaign whose key's search has no time
// (a budget spent before the key's turn) reports the key not checked,
// with the reason, and fails; a tolerance covering the key lets it pass;
// the history is on disk before the checkers run, and a re-check of that
// key alone with a budget decides it.
func TestChaosUncheckedKeyFails(t *testing.T) {
	path := filepath.Join(t.TempDir(), "h.json")
	var before os.FileInfo
	beforeCheck = func(rep *ChaosReport) {
		st, err := os.Stat(path)
		if err != nil {
			t.Errorf("before the checkers: %v", err)
		}
		before = st
	}
	defer func() { beforeCheck = nil }()

	rep := memCampaign(t, ChaosConfig{History: path, Budget: CheckBudget{Total: time.Nanosecond}}, nil)
	if before == nil || before.Size() == 0 || rep.HistoryFile != path {
		t.Fatalf("history before the checkers: %v, report names %q", before, rep.HistoryFile)
	}
	f := rep.Failures()
	if rep.Linearizable || len(rep.UncheckedKeys) != 1 || !strings.HasPrefix(rep.UncheckedKeys[0].Reason, "time: ") || len(f) != 1 ||
		!strings.Contains(f[0], "1 of 1 keys not checked") || !strings.Contains(f[0], "--key chaos/0") {
		t.Fatalf("an unchecked key: unchecked %+v, failures %q", rep.UncheckedKeys, f)
	}

	loaded, err := LoadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	// The same, tolerated.
	tol := loaded.RecheckWith(CheckBudget{Total: time.Nanosecond, TolerateUnchecked: 1})
	if len(tol.UncheckedKeys) != 1 || len(tol.Failures()) != 0 {
		t.Errorf("tolerated: unchecked %+v, failures %q", tol.UncheckedKeys, tol.Failures())
	}
	// Half tolerated is not one key of one.
	if half := loaded.RecheckWith(CheckBudget{Total: time.Nanosecond, TolerateUnchecked: 0.5}); len(half.Failures()) != 1 {
		t.Errorf("half tolerated, 1 of 1 unchecked: failures %q", half.Failures())
	}
	again := loaded.RecheckWith(CheckBudget{Keys: []string{"chaos/0"}, PerKey: time.Minute})
	if !again.Linearizable || len(again.UncheckedKeys) != 0 || len(again.Failures()) != 0 || again.LinearizabilityKeys != 1 {
		t.Errorf("the key re-checked with time: %q", again.Verdicts())
	}
	if none := loaded.RecheckWith(CheckBudget{Keys: []string{"nope"}}); none.LinearizabilityKeys != 0 {
		t.Errorf("a key that is not there: %d keys checked", none.LinearizabilityKeys)
	}
}
