package testenv

import (
	"encoding/json"
	"net/http"
	"testing"
	"time"
)

// peers reads the node's GET /v1/cluster/peers.
func peers(nd *RaftNode) (pl struct {
	LeaderID string   `json:"leaderId"`
	Voters   []string `json:"voters"`
}, err error) {
	c := &http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + nd.APIAddr + "/v1/cluster/peers")
	if err != nil {
		return pl, err
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&pl)
	return pl, err
}

func TestRaftlockCluster(t *testing.T) {
	bin := BuildLockgate(t)
	c := StartRaftlock(t, bin, 3)
	l := c.Leader()
	if l == nil {
		t.Fatal("no leader after StartRaftlock")
	}
	for _, nd := range c.Nodes {
		pl, err := peers(nd)
		if err != nil {
			t.Fatal(err)
		}
		if pl.LeaderID != l.ID || len(pl.Voters) != 3 {
			t.Fatalf("node %s: leader %q voters %v, want leader %s of 3", nd.ID, pl.LeaderID, pl.Voters, l.ID)
		}
	}
	// The leader killed hard: the others elect a new one; it rejoins.
	l.Kill()
	if l.PID() != 0 {
		t.Fatal("killed leader still has a PID")
	}
	l.Restart()
	if nl := c.Leader(); nl == nil {
		t.Fatal("no leader after the old leader restarted")
	}
}
