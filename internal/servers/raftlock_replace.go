package servers

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// Rolling upgrades and downgrades: a node of a Raftlock cluster replaced
// by another lockgate binary on the same data directory and addresses,
// and the Raft indexes that say when it has caught up. Both read only
// what every lockgate binary serves (/v1/cluster/peers, /metrics), so
// that they work on binaries older than today's endpoints.

// Binary returns the lockgate binary the node runs (or ran last), and
// runs at its next Restart.
func (nd *RaftNode) Binary() string {
	nd.proc.mu.Lock()
	defer nd.proc.mu.Unlock()
	return nd.proc.path
}

// RestartWith replaces the node's binary: it stops the node if it runs
// (SIGTERM: a leader hands its leadership over), starts bin on the same
// data directory and addresses, and returns once the node knows a
// leader, which needs a quorum of the cluster running. Later Restarts run
// bin too. The node starts without --bootstrap and --join, as
// docs/operations.md's upgrade procedure restarts a member (its data
// directory holds the cluster): a join request of one binary need not be
// one an older member accepts.
func (nd *RaftNode) RestartWith(bin string) error {
	nd.proc.stop()
	nd.proc.mu.Lock()
	nd.proc.path = bin
	nd.proc.args = withoutJoin(nd.proc.args)
	nd.proc.mu.Unlock()
	return nd.proc.restart("RaftNode.RestartWith", nd.ready)
}

// RestartJoining is RestartWith keeping the node's --join (but not
// --bootstrap), as a deployment that passes the same flags at every start
// does (docker-compose.yml): the node asks to join a cluster it is
// already in, which a member of either binary must accept.
func (nd *RaftNode) RestartJoining(bin string) error {
	nd.proc.stop()
	nd.proc.mu.Lock()
	nd.proc.path = bin
	nd.proc.args = withoutBootstrap(nd.proc.args)
	nd.proc.mu.Unlock()
	return nd.proc.restart("RaftNode.RestartJoining", nd.ready)
}

func withoutBootstrap(args []string) []string {
	out := make([]string, 0, len(args))
	for _, a := range args {
		if a != "--bootstrap" {
			out = append(out, a)
		}
	}
	return out
}

// withoutJoin returns args without --bootstrap and --join (with its value).
func withoutJoin(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		switch a := args[i]; {
		case a == "--bootstrap" || strings.HasPrefix(a, "--join="):
		case a == "--join":
			i++ // its value
		default:
			out = append(out, a)
		}
	}
	return out
}

// Done is closed when the node's current (or last) process has exited;
// nil before its first start. ExitStatus then says how it ended.
func (nd *RaftNode) Done() <-chan struct{} { return nd.proc.doneChan() }

// ExitStatus describes how the node's last process ended ("still
// running" while it runs).
func (nd *RaftNode) ExitStatus() string { return nd.proc.exitStatus() }

// LogTail returns the last lines the node's current or last process
// wrote, indented, for error messages.
func (nd *RaftNode) LogTail() string { return nd.proc.logTail() }

// LeaderID returns the id of the leader the node knows ("" for none).
func (nd *RaftNode) LeaderID() (string, error) {
	pl, err := nd.peers()
	if err != nil {
		return "", err
	}
	return pl.LeaderID, nil
}

// RaftIndexes are a node's Raft log positions, as its /metrics reports
// them (lockgate_raft_commit_index, lockgate_raft_applied_index).
type RaftIndexes struct {
	Commit, Applied uint64
}

// Indexes reads the node's commit and applied indexes from its /metrics.
func (nd *RaftNode) Indexes() (RaftIndexes, error) {
	resp, err := healthClient.Get("http://" + nd.APIAddr + "/metrics")
	if err != nil {
		return RaftIndexes{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return RaftIndexes{}, fmt.Errorf("%s/metrics: %s", nd.APIAddr, resp.Status)
	}
	return parseRaftIndexes(io.LimitReader(resp.Body, 16<<20))
}

// parseRaftIndexes reads the two gauges from a Prometheus text exposition.
func parseRaftIndexes(r io.Reader) (RaftIndexes, error) {
	var ix RaftIndexes
	var seen int
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 1<<20)
	for sc.Scan() {
		// name{labels} value, or name value
		line := sc.Text()
		sp := strings.LastIndexByte(line, ' ')
		if sp < 0 || strings.HasPrefix(line, "#") {
			continue
		}
		name, val := line[:sp], line[sp+1:]
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name = name[:i]
		}
		var dst *uint64
		switch name {
		case "lockgate_raft_commit_index":
			dst = &ix.Commit
		case "lockgate_raft_applied_index":
			dst = &ix.Applied
		default:
			continue
		}
		f, err := strconv.ParseFloat(val, 64)
		if err != nil {
			return RaftIndexes{}, fmt.Errorf("metric %s: %w", name, err)
		}
		*dst = uint64(f)
		seen++
	}
	if err := sc.Err(); err != nil {
		return RaftIndexes{}, err
	}
	if seen < 2 {
		return RaftIndexes{}, fmt.Errorf("no lockgate_raft_commit_index and lockgate_raft_applied_index in /metrics")
	}
	return ix, nil
}

// WaitCaughtUp returns once nd has applied every entry the cluster's
// leader had committed when it was called, or fails with the last probe's
// error after timeout (or when ctx ends, or nd exits).
func (c *Raftlock) WaitCaughtUp(ctx context.Context, nd *RaftNode, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var target uint64
	check := func() error {
		if target == 0 {
			l := c.Leader()
			if l == nil {
				return fmt.Errorf("no leader known")
			}
			ix, err := l.Indexes()
			if err != nil {
				return fmt.Errorf("leader %s: %w", l.ID, err)
			}
			target = ix.Commit
		}
		ix, err := nd.Indexes()
		if err != nil {
			return err
		}
		if ix.Applied < target {
			return fmt.Errorf("applied %d of the leader's %d", ix.Applied, target)
		}
		return nil
	}
	for {
		err := check()
		if err == nil {
			return nil
		}
		select {
		case <-nd.proc.doneChan():
			return fmt.Errorf("servers: WaitCaughtUp: node %s exited (%s); last output:\n%s", nd.ID, nd.proc.exitStatus(), nd.proc.logTail())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("servers: WaitCaughtUp: node %s not caught up after %v: %w", nd.ID, timeout, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("servers: WaitCaughtUp: node %s: %w (%v)", nd.ID, ctx.Err(), err)
		case <-time.After(pollInterval):
		}
	}
}
