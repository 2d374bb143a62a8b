package cli

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/internal/testenv"
)

// TestFollowerForgetsKilledLeader SIGKILLs the leader of a three-node
// cluster of `lockgate node` processes and asks a follower for a lock over
// REST until it names another leader: from one election timeout after the
// kill (the bound within which a follower may still name a leader it last
// heard from, plus a margin for the follower's own scheduling), no answer
// may redirect to the dead node. Before, followers kept naming it until
// their own election started, and a client following the documented
// redirects spent its hops on a dead address.
func TestFollowerForgetsKilledLeader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	bin := testenv.BuildLockgate(t)
	cluster := testenv.StartRaftlock(t, bin, 3)
	leader := cluster.Leader()
	if leader == nil {
		t.Fatal("no leader")
	}
	var follower string
	for _, nd := range cluster.Nodes {
		if nd != leader {
			follower = nd.APIAddr
			break
		}
	}
	hc := &http.Client{Timeout: 5 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	// The answer names the leader in a 307's Location.
	names := func() (dead bool, status int) {
		resp, err := hc.Post("http://"+follower+"/locks/hint", "application/json", strings.NewReader(`{}`))
		if err != nil {
			t.Fatalf("follower: %v", err)
		}
		resp.Body.Close()
		return strings.Contains(resp.Header.Get("Location"), leader.APIAddr), resp.StatusCode
	}
	if dead, st := names(); !dead || st != http.StatusTemporaryRedirect {
		t.Fatalf("before the kill the follower answered %d, naming the leader %v: want a 307 to it", st, dead)
	}
	leader.Kill()
	killed := time.Now()
	bound := max(raftlock.DefaultHeartbeatTimeout, raftlock.DefaultElectionTimeout) + 250*time.Millisecond
	var stale, after int
	for time.Since(killed) < bound+2*time.Second {
		asked := time.Now()
		dead, _ := names()
		if dead && asked.Sub(killed) > bound {
			after++
		}
		if dead {
			stale++
		}
		time.Sleep(10 * time.Millisecond)
	}
	if after > 0 {
		t.Fatalf("%d answers asked later than %v after the SIGKILL still redirected to the dead leader (%d in all)", after, bound, stale)
	}
	t.Logf("%d answers named the dead leader within %v of its kill, none after", stale, bound)
}
