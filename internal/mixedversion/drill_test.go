package mixedversion

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/upgrade"
)

// TestUpgradeDrillSmoke runs `lockgate-bench upgrade` briefly (40 s) from
// the binary before the format gate to today's and back: the checkers
// pass (no overlap, no token granted twice, no stale write accepted,
// linearizable), the gate rises to format 3 and falls to 1, and the
// clients used what each phase offered.
func TestUpgradeDrillSmoke(t *testing.T) {
	t.Parallel() // both wait on processes far more than they compute
	old := oldLockgate(t)
	cur := newLockgate(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	w := &logWriter{t: t}
	rep, err := upgrade.RunUpgrade(ctx, upgrade.UpgradeConfig{From: old, To: cur, FromName: oldRevision, ToName: "today",
		Duration: 40 * time.Second, Log: w, Progress: w})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := rep.WriteTable(&out); err != nil {
		t.Fatal(err)
	}
	t.Logf("report:\n%s", out.String())
	if !rep.Passed() {
		t.Errorf("failures: %q", rep.Failures)
		if f, err := os.Create(filepath.Join(t.ArtifactDir(), "history.json")); err == nil {
			json.NewEncoder(f).Encode(rep.History())
			f.Close()
			t.Logf("history: %s", f.Name())
		}
	}
	if rep.Overlaps != 0 || rep.StaleWritesAccepted != 0 || rep.TokensReused != 0 || rep.TokensReusedAnyKey != 0 ||
		rep.TokenRegressions != 0 || !rep.Linearizable {
		t.Errorf("checkers: overlaps %d, stale writes accepted %d, tokens reused %d (any key %d), regressions %d, linearizable %v",
			rep.Overlaps, rep.StaleWritesAccepted, rep.TokensReused, rep.TokensReusedAnyKey, rep.TokenRegressions, rep.Linearizable)
	}
	if rep.GateRoseTo != 3 || rep.GateRoseS == nil || rep.GateFellS == nil || *rep.GateFellS < *rep.GateRoseS {
		t.Errorf("gate rose to %d at %v, fell at %v: want 3, then 1", rep.GateRoseTo, rep.GateRoseS, rep.GateFellS)
	}
	if rep.FeaturesOnS == nil || rep.FeaturesOffS == nil {
		t.Errorf("features on at %v, off at %v: want a client offered sessions, and one not after the downgrade", rep.FeaturesOnS, rep.FeaturesOffS)
	}
	if len(rep.Swaps) != 6 || len(rep.Phases) != 7 {
		t.Errorf("%d node replacements over %d phases, want 6 over 7", len(rep.Swaps), len(rep.Phases))
	}
	for _, p := range rep.Phases {
		if p.Name == upgrade.PhaseNew && p.Ops.SessionGrants == 0 {
			t.Errorf("no grant in a session while the gate was at 3: %+v", p.Ops)
		}
		if (p.Name == upgrade.PhaseOld || p.Name == upgrade.PhaseOldAgain) && p.Ops.SessionGrants != 0 {
			t.Errorf("%d grants in a session on the binary before sessions", p.Ops.SessionGrants)
		}
	}
	for _, kind := range []string{"exclusive", "multikey", "rw-shared", "semaphore"} {
		if rep.Ops.ByKind[kind] == 0 {
			t.Errorf("no %s grant over the drill: %v", kind, rep.Ops.ByKind)
		}
	}
}
