package upgrade

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/check"
)

// The drill's own token check: raftlock's counter is the cluster's, so a
// token granted for one key and then for another is caught, and grants of
// distinct tokens pass. (The drill itself runs in internal/mixedversion,
// against the binary before the format gate.)
func TestTokensReusedAnyKey(t *testing.T) {
	ms := time.Millisecond
	grant := func(client int, key string, token uint64, at time.Duration) check.Op {
		return check.Op{Client: client, Key: key, Kind: check.Acquire, OK: true, Token: token, Start: at, End: at + ms}
	}
	good := check.History{grant(0, "a", 1, 0), grant(1, "b", 2, 2*ms), grant(0, "a", 3, 4*ms),
		{Client: 2, Key: "b", Kind: check.Acquire, Unknown: true, Start: 5 * ms, End: 9 * ms}}
	if n, ex := tokensReusedAnyKey(good, 5); n != 0 {
		t.Errorf("distinct tokens: %d reused (%q)", n, ex)
	}
	bad := append(good, grant(3, "c", 2, 10*ms))
	if n, ex := tokensReusedAnyKey(bad, 5); n != 1 || len(ex) != 1 || !strings.Contains(ex[0], "token 2 granted again") {
		t.Errorf("token 2 granted for b and then c: %d reused (%q), want 1", n, ex)
	}
	// Per key, the same history passes check's Tokens: only the
	// drill's check sees it.
	if reused, _, _ := check.Tokens(bad, 5); reused != 0 {
		t.Errorf("check.Tokens counts %d: the histories no longer tell the two checks apart", reused)
	}
}

// A drill that ran to its end fails unless the gate rose and fell; a
// broken checker verdict, a node exit and a drill error each fail it.
func TestUpgradeFailures(t *testing.T) {
	at := func(s float64) *float64 { return &s }
	ok := UpgradeReport{To: "new", Linearizable: true, GateRoseTo: 3, GateRoseS: at(10), GateFellS: at(30)}
	if f := ok.failures(); len(f) != 0 {
		t.Errorf("a clean drill fails: %q", f)
	}
	for name, broken := range map[string]func(r *UpgradeReport){
		"gate never rose":   func(r *UpgradeReport) { r.GateRoseS = nil },
		"gate never fell":   func(r *UpgradeReport) { r.GateFellS = nil },
		"overlap":           func(r *UpgradeReport) { r.Overlaps = 1 },
		"stale write":       func(r *UpgradeReport) { r.StaleWritesAccepted = 1 },
		"token any key":     func(r *UpgradeReport) { r.TokensReusedAnyKey = 1 },
		"token regression":  func(r *UpgradeReport) { r.TokenRegressions = 1 },
		"not linearizable":  func(r *UpgradeReport) { r.Linearizable = false },
		"node exit":         func(r *UpgradeReport) { r.NodeExits = []string{"node 2 is not running"} },
		"drill ended early": func(r *UpgradeReport) { r.DrillError = "phase upgrade: no leader" },
	} {
		r := ok
		broken(&r)
		r.Failures = r.failures()
		var out bytes.Buffer
		if err := r.WriteTable(&out); err != nil {
			t.Fatal(err)
		}
		if r.Passed() || !strings.Contains(out.String(), "FAILED") {
			t.Errorf("%s: passed (%q)", name, r.Failures)
		}
	}
}

// The configuration names what is wrong.
func TestUpgradeConfig(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "lockgate")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []UpgradeConfig{
		{To: bin},
		{From: bin, To: bin + ".missing"},
		{From: bin, To: bin, Duration: time.Second},
		{From: bin, To: bin, DowngradeTo: 9},
		{From: bin, To: bin, Workers: -1},
	} {
		if err := c.fill(); err == nil {
			t.Errorf("%+v: accepted", c)
		}
	}
	c := UpgradeConfig{From: bin, To: bin}
	if err := c.fill(); err != nil || c.Duration != DefaultUpgradeDuration || c.DowngradeTo != DefaultDowngradeTo || c.Workers != DefaultUpgradeWorkers {
		t.Errorf("defaults: %+v, %v", c, err)
	}
}
