package demo

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestDemo runs a short demo: it must see no overlapping holds, reject the
// paused client's late write, and survive the leader's stop.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	// The web console, polled while the demo runs: it shows the demo's
	// locks and, after the failover, the new leader.
	watched := make(chan consoleSeen, 1)
	started := func(url string) {
		go func() { watched <- watchConsole(strings.TrimSuffix(url, "/ui/"), 8*time.Second) }()
	}
	sum, err := Run(context.Background(), Config{Duration: 8 * time.Second, Clients: 4, Started: started}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	if !strings.Contains(out.String(), "web console: "+sum.ConsoleURL) || sum.ConsoleURL == "" {
		t.Errorf("the demo did not print its console URL %q:\n%s", sum.ConsoleURL, out.String())
	}
	seen := <-watched
	if !seen.keys["orders"] && !seen.keys["invoices"] {
		t.Errorf("the console never listed the demo's keys (saw %v)", seen.keys)
	}
	if !seen.leaders[sum.OldLeader] || !seen.leaders[sum.NewLeader] {
		t.Errorf("the console showed leaders %v, want the old %s and the new %s", seen.leaders, sum.OldLeader, sum.NewLeader)
	}
	t.Logf("summary %+v\n%s", sum, out.String())
	if sum.Overlaps != 0 || sum.TokenRegresses != 0 {
		t.Errorf("overlaps %d, token regressions %d; want 0", sum.Overlaps, sum.TokenRegresses)
	}
	if sum.StaleRejected < 1 || !strings.Contains(sum.LateWriteStatus, "rejected") {
		t.Errorf("stale writes rejected %d (%s); want the paused client's late write rejected", sum.StaleRejected, sum.LateWriteStatus)
	}
	if sum.Grants < 10 || sum.Writes < 10 || sum.NewLeader == "" || sum.NewLeader == sum.OldLeader {
		t.Errorf("grants %d, writes %d, leader %s → %s", sum.Grants, sum.Writes, sum.OldLeader, sum.NewLeader)
	}
}

type consoleSeen struct {
	keys    map[string]bool
	leaders map[string]bool
}

// watchConsole polls a node's console endpoints for d: the keys its lock
// table listed and the leaders its cluster view named.
func watchConsole(base string, d time.Duration) consoleSeen {
	seen := consoleSeen{keys: map[string]bool{}, leaders: map[string]bool{}}
	get := func(path string, v any) {
		resp, err := http.Get(base + path)
		if err != nil {
			return
		}
		defer resp.Body.Close()
		json.NewDecoder(resp.Body).Decode(v)
	}
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(100 * time.Millisecond) { // sampling a live page's data, as the page does
		var locks struct{ Locks []struct{ Key string } }
		get("/v1/console/locks", &locks)
		for _, l := range locks.Locks {
			seen.keys[l.Key] = true
		}
		var cl struct{ LeaderID string }
		get("/v1/console/cluster", &cl)
		if cl.LeaderID != "" {
			seen.leaders[cl.LeaderID] = true
		}
	}
	return seen
}
