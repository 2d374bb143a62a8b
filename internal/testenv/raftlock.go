package testenv

import (
	"context"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

// Raftlock is a raftlock cluster of `lockgate node` processes, each with its
// own data directory, Raft port and API port on 127.0.0.1, owned by a test:
// a servers.Raftlock whose faults fail the test. It is stopped, and its
// data removed, by a t.Cleanup registered by StartRaftlock. Its methods
// must not be called after the test has finished.
type Raftlock struct {
	// APIAddrs are the nodes' API addresses (host:port: the WebSocket/REST
	// gateway and the membership endpoints), in node order.
	APIAddrs []string
	// Nodes are the cluster's servers, in the order of APIAddrs.
	Nodes []*RaftNode

	c *servers.Raftlock
}

// RaftNode is one `lockgate node` process of a Raftlock cluster.
type RaftNode struct {
	*servers.RaftNode
	t testing.TB
}

// RaftlockOptions adjusts the nodes of StartRaftlockWith; see
// servers.RaftlockOptions (Log is set to the test).
type RaftlockOptions = servers.RaftlockOptions

// BuildLockgate builds the lockgate binary into a temporary directory
// removed when t ends, and returns its path: for tests that run raftlock
// nodes as processes (StartRaftlock).
func BuildLockgate(t testing.TB) string {
	t.Helper()
	dir := t.TempDir()
	bin := filepath.Join(dir, "lockgate")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/lockgate/lockgate/cmd/lockgate")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("testenv: building lockgate: %v\n%s", err, out)
	}
	return bin
}

// StartRaftlock starts an n-node raftlock cluster from the lockgate binary
// bin: node 1 bootstraps and the others join it, all started together. It
// returns once every node lists all n voters and a leader on
// /v1/cluster/peers, and fails the test with the nodes' last output if that
// does not happen within 30 seconds. The nodes log to t.Log.
func StartRaftlock(t testing.TB, bin string, n int) *Raftlock {
	t.Helper()
	return StartRaftlockWith(t, bin, n, RaftlockOptions{})
}

// StartRaftlockWith is StartRaftlock with options.
func StartRaftlockWith(t testing.TB, bin string, n int, opts RaftlockOptions) *Raftlock {
	t.Helper()
	opts.Log = t
	c, err := servers.StartRaftlock(context.Background(), bin, n, opts)
	if err != nil {
		failStart(t, "StartRaftlock", err)
	}
	t.Cleanup(c.Close)
	w := &Raftlock{APIAddrs: c.APIAddrs, c: c}
	for _, nd := range c.Nodes {
		w.Nodes = append(w.Nodes, &RaftNode{RaftNode: nd, t: t})
	}
	return w
}

// Stop stops every node (SIGTERM: a clean shutdown), concurrently.
func (c *Raftlock) Stop() { c.c.Stop() }

// Leader returns the node that the cluster reports as its leader, or nil
// when no running node knows one.
func (c *Raftlock) Leader() *RaftNode {
	l := c.c.Leader()
	for _, nd := range c.Nodes {
		if l != nil && nd.RaftNode == l {
			return nd
		}
	}
	return nil
}

// Restart starts the node again from its data directory on the same
// addresses (stopping it first if it runs) and returns once it knows a
// leader, which needs a quorum of the cluster running; the test fails if
// it does not.
func (nd *RaftNode) Restart() {
	nd.t.Helper()
	if err := nd.RaftNode.Restart(); err != nil {
		nd.t.Fatalf("testenv: %v", err)
	}
}

// Pause freezes the node with SIGSTOP; Resume continues it. Either marks
// the test failed (t.Errorf) if the node is not running.
func (nd *RaftNode) Pause()  { nd.t.Helper(); errorf(nd.t, nd.RaftNode.Pause()) }
func (nd *RaftNode) Resume() { nd.t.Helper(); errorf(nd.t, nd.RaftNode.Resume()) }
