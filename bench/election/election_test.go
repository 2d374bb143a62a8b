package election

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/internal/benchtest"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/testenv"
)

// TestElectionSmoke runs the failover bench briefly on a raftlock cluster:
// campaigner processes of the lockgate binary, the leader's process killed
// twice; each kill is followed by a new leader, another campaigner, with a
// higher token, and the report states the bound it was held to.
func TestElectionSmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster and campaigner processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	bin := testenv.BuildLockgate(t)
	s := benchtest.Provision(t, ctx, []string{provision.Raft}, provision.ProvisionOptions{Lockgate: bin})
	defer s.Close()
	rep, err := RunElection(ctx, ElectionConfig{Endpoints: s.Spec.Raft, Lockgate: bin, Kills: 2, TTL: time.Second,
		CommitSamples: 10, Progress: benchtest.Writer(t)})
	if err != nil {
		t.Fatal(err)
	}
	table := benchtest.LogTable(t, rep)
	if len(rep.Kills) != 2 {
		t.Fatalf("%d kills, want 2", len(rep.Kills))
	}
	for _, k := range rep.Kills {
		if !k.Elected || k.Next == k.Killed || k.NextToken <= k.Token || k.FailoverMs <= 0 {
			t.Errorf("kill %d: %+v: want a new leader, another campaigner, with a higher token", k.N, k)
		}
	}
	if rep.CommitP50Ms <= 0 || rep.BoundMs != rep.TTLMs+rep.CommitP50Ms || !strings.Contains(table, "BOUND ms") {
		t.Errorf("commit p50 %v ms, bound %v ms (ttl %v ms)", rep.CommitP50Ms, rep.BoundMs, rep.TTLMs)
	}
}

// TestElectionVerdict: the goal is met only when every kill saw a new
// leader within TTL + commit.
func TestElectionVerdict(t *testing.T) {
	rep := &ElectionReport{TTLMs: 1000, CommitP50Ms: 5, Kills: []Kill{
		{N: 1, Elected: true, FailoverMs: 900}, {N: 2, Elected: true, FailoverMs: 1004}, {N: 3, Elected: true, FailoverMs: 600},
	}}
	rep.summarise()
	if !rep.Met || rep.Within != 3 || rep.P50Ms != 900 || rep.MaxMs != 1004 || rep.BoundMs != 1005 {
		t.Errorf("within bound: %+v", rep)
	}
	rep.Kills[1].FailoverMs = 1006
	rep.summarise()
	if rep.Met || rep.Within != 2 {
		t.Errorf("one kill over the bound: met %v, within %d", rep.Met, rep.Within)
	}
	rep.Kills[1].FailoverMs, rep.Kills[1].Elected = 400, false
	rep.summarise()
	if rep.Met || rep.Within != 2 {
		t.Errorf("one kill without a new leader: met %v, within %d", rep.Met, rep.Within)
	}
	rep.Kills = nil
	rep.summarise()
	if rep.Met {
		t.Error("no kills: met")
	}
}
