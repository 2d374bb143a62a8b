package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
)

func TestPeersCommand(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 400*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *raftlock.Node
	for _, n := range c.Nodes() {
		if n != l {
			follower = n
		}
	}
	// The member directory fills in as joins commit; ask until it is whole.
	var out string
	for {
		code, o, errOut := run(t, "peers", "--addr", follower.APIAddr())
		if code != 0 {
			t.Fatalf("peers: exit %d: %s", code, errOut)
		}
		out = o
		if strings.Count(out, "127.0.0.1:") == 6 || ctx.Err() != nil {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out, "leader: "+l.ID()) {
		t.Errorf("peers output does not name leader %s:\n%s", l.ID(), out)
	}
	for _, n := range c.Nodes() {
		if !strings.Contains(out, n.RaftAddr()) || !strings.Contains(out, n.APIAddr()) {
			t.Errorf("peers output lacks node %s (%s, %s):\n%s", n.ID(), n.RaftAddr(), n.APIAddr(), out)
		}
	}
	code, js, _ := run(t, "peers", "--addr", l.APIAddr(), "--json")
	var pl raftlock.PeerList
	if code != 0 || json.Unmarshal([]byte(js), &pl) != nil || pl.LeaderID != l.ID() || len(pl.Voters) != 3 {
		t.Errorf("peers --json: exit %d, %+v from %q", code, pl, js)
	}
}

func TestPeersUnreachable(t *testing.T) {
	code, _, errOut := run(t, "peers", "--addr", "127.0.0.1:1", "--timeout", "2s")
	if code == 0 || !strings.Contains(errOut, "127.0.0.1:1") {
		t.Errorf("peers against a dead address: exit %d, stderr %q", code, errOut)
	}
}

func TestNodeFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--data-dir", t.TempDir()}, `"id" not set`},
		{[]string{"node", "--id", "1"}, `"data-dir" not set`},
		{[]string{"node", "--id", "1", "--data-dir", t.TempDir(), "--bootstrap", "--join", "127.0.0.1:50051"}, "exclude each other"},
		{[]string{"node", "--id", "1", "--data-dir", t.TempDir(), "--store", "tape"}, "tape"},
		{[]string{"cluster", "--data-dir", t.TempDir(), "--nodes", "0"}, "--nodes 0"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want it to mention %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestNodePeerAuthRequired: a node whose Raft port others can reach
// refuses to start without peer authentication and says which flags to
// add; with TLS but no CA to verify peers it names --tls-ca. Nothing
// listens and nothing is written to the data directory.
func TestNodePeerAuthRequired(t *testing.T) {
	dir, _ := secureFiles(t)
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"--raft-addr", "0.0.0.0:0"}, []string{"--insecure-raft-no-peer-auth", "--tls-cert", "--tls-ca"}},
		{[]string{"--raft-addr", "0.0.0.0:0", "--raft-advertise", "raft1:8081"}, []string{"--insecure-raft-no-peer-auth", "--tls-cert"}},
		{[]string{"--raft-addr", "127.0.0.1:0", "--raft-advertise", "10.1.2.3:8081"}, []string{"--insecure-raft-no-peer-auth"}},
		{[]string{"--raft-addr", "0.0.0.0:0", "--tls-cert", filepath.Join(dir, "cert.pem"), "--tls-key", filepath.Join(dir, "key.pem")}, []string{"--tls-ca"}},
	} {
		data := t.TempDir()
		args := append([]string{"node", "--id", "1", "--data-dir", data, "--bootstrap", "--api-addr", "127.0.0.1:0"}, tc.args...)
		done := make(chan struct{})
		var code int
		var errOut string
		go func() { code, _, errOut = run(t, args...); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%v is still running after 30 s; want a refusal", tc.args)
		}
		if code == 0 {
			t.Errorf("%v: exit 0, want a refusal", tc.args)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q does not name %s", tc.args, errOut, w)
			}
		}
		if entries, _ := os.ReadDir(data); len(entries) != 0 {
			t.Errorf("%v: the refused node wrote to its data dir: %v", tc.args, entries)
		}
	}
	// The insecure flag is the way out (the wildcard bind then needs an
	// advertised address, the next check).
	code, _, errOut := run(t, "node", "--id", "1", "--data-dir", t.TempDir(), "--raft-addr", "0.0.0.0:0", "--insecure-raft-no-peer-auth")
	if code == 0 || strings.Contains(errOut, "--insecure-raft-no-peer-auth") || !strings.Contains(errOut, "--raft-advertise") {
		t.Errorf("with --insecure-raft-no-peer-auth: exit %d, %q; want the --raft-advertise check next", code, errOut)
	}
}
