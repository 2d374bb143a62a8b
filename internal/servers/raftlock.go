package servers

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"time"
)

// Raftlock is a raftlock cluster of `lockgate node` processes, each with its
// own data directory, Raft port and API port on 127.0.0.1: raftlock measured
// and faulted the way it runs in production, not as goroutines of the
// caller. Close stops it and removes its data.
type Raftlock struct {
	// APIAddrs are the nodes' API addresses (host:port: the WebSocket/REST
	// gateway and the membership endpoints), in node order.
	APIAddrs []string
	// Nodes are the cluster's servers, in the order of APIAddrs.
	Nodes []*RaftNode

	base string // removed by Close
	bin  string
	log  Logger

	mu     sync.Mutex
	added  []*RaftNode // AddNode's nodes, stopped by Stop
	nextID int         // the id AddNode gives next
}

// RaftNode is one `lockgate node` process of a Raftlock cluster.
type RaftNode struct {
	// ID is the server id, "1", "2", ...
	ID string
	// RaftAddr and APIAddr are the node's Raft transport and API addresses.
	RaftAddr, APIAddr string
	// DataDir is the node's data directory, kept across Restart.
	DataDir string

	proc *proc
}

// RaftlockOptions adjusts the nodes of StartRaftlock.
type RaftlockOptions struct {
	// Args returns extra `lockgate node` arguments for node i, given every
	// node's addresses (e.g. proxies: --api-addr, --api-listen,
	// --raft-dial). It is called once per start attempt, before any node
	// starts.
	Args func(i int, nodes []*RaftNode) []string
	// Log receives the nodes' output; nil discards it.
	Log Logger
	// DataDir, when not nil, returns the data directory of node i (a
	// directory that exists, e.g. on a small filesystem the caller
	// mounted), or "" for the default under the cluster's temporary
	// directory. The node's data goes in a fresh subdirectory of it, which
	// Close removes.
	DataDir func(i int) string
}

// StartRaftlock starts an n-node raftlock cluster from the lockgate binary
// bin: node 1 bootstraps and the others join it, all started together. It
// returns once every node lists all n voters and a leader on
// /v1/cluster/peers, and fails with the nodes' last output if that does not
// happen within readyTimeout (or ctx ends). On error nothing is left
// running.
func StartRaftlock(ctx context.Context, bin string, n int, opts RaftlockOptions) (*Raftlock, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: StartRaftlock: n = %d, want at least 1", n)
	}
	base, err := os.MkdirTemp("", "lockgate-raftlock-")
	if err != nil {
		return nil, fmt.Errorf("servers: StartRaftlock: %w", err)
	}
	c := &Raftlock{base: base, bin: bin, log: opts.Log, nextID: n + 1}
	err = retryPorts(2*n, freePorts, func(ports []int, attempt int) error {
		dir := filepath.Join(base, fmt.Sprintf("attempt%d", attempt))
		c.Nodes = make([]*RaftNode, n)
		c.APIAddrs = make([]string, n)
		for i := range c.Nodes {
			id := strconv.Itoa(i + 1)
			nd := &RaftNode{
				ID:       id,
				RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[2*i]),
				APIAddr:  fmt.Sprintf("127.0.0.1:%d", ports[2*i+1]),
				DataDir:  filepath.Join(dir, "node-"+id),
			}
			if opts.DataDir != nil {
				if d := opts.DataDir(i); d != "" {
					// A fresh directory per attempt there too.
					nd.DataDir = filepath.Join(d, fmt.Sprintf("attempt%d-node-%s", attempt, id))
				}
			}
			if err := os.MkdirAll(nd.DataDir, 0o700); err != nil {
				return err
			}
			args := []string{"node", "--id", id, "--data-dir", nd.DataDir,
				"--raft-addr", nd.RaftAddr, "--api-addr", nd.APIAddr}
			if i == 0 {
				args = append(args, "--bootstrap")
			} else {
				args = append(args, "--join", c.Nodes[0].APIAddr)
			}
			nd.proc = &proc{
				log:   opts.Log,
				name:  fmt.Sprintf("raftlock[%s %s]", id, nd.APIAddr),
				path:  bin,
				args:  args,
				dir:   nd.DataDir,
				ports: []int{ports[2*i], ports[2*i+1]},
			}
			c.Nodes[i] = nd
			c.APIAddrs[i] = nd.APIAddr
		}
		if opts.Args != nil {
			for i, nd := range c.Nodes {
				nd.proc.args = append(nd.proc.args, opts.Args(i, c.Nodes)...)
			}
		}
		procs := make([]*proc, n)
		checks := make([]func() error, n)
		for i, nd := range c.Nodes {
			if err := nd.proc.start(); err != nil {
				c.Stop()
				return err
			}
			procs[i], checks[i] = nd.proc, func() error { return nd.formed(n) }
		}
		if err := waitAll(ctx, time.Now().Add(readyTimeout), procs, checks); err != nil {
			c.Stop()
			return err
		}
		return nil
	})
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("servers: StartRaftlock: %w", err)
	}
	return c, nil
}

// Close stops the cluster (see Stop) and removes its data.
func (c *Raftlock) Close() {
	c.Stop()
	for _, nd := range c.Nodes {
		os.RemoveAll(nd.DataDir)
	}
	os.RemoveAll(c.base)
}

// Stop stops every node (SIGTERM: a clean shutdown), concurrently, the
// ones AddNode started too.
func (c *Raftlock) Stop() {
	c.mu.Lock()
	all := append(slices.Clone(c.Nodes), c.added...)
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, nd := range all {
		if nd.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			nd.proc.stop()
		}()
	}
	wg.Wait()
}

// AddNode starts one more `lockgate node` process that joins the running
// cluster through a running node's API as a voter, with a new id ("4"
// after a three-node start, then "5", ...), fresh free ports and an empty
// data directory, and extra arguments args. It returns once the node
// lists itself among the voters and knows a leader, or fails (leaving it
// stopped) after readyTimeout or when ctx ends. The node is not in Nodes:
// the caller removes it from the cluster (raftlock.Remove) and stops it
// (RaftNode.Stop) when done, and Close stops it if the caller did not.
func (c *Raftlock) AddNode(ctx context.Context, args ...string) (*RaftNode, error) {
	var seed string
	for _, nd := range c.Nodes {
		if nd.PID() != 0 {
			seed = nd.APIAddr
			break
		}
	}
	if seed == "" {
		return nil, fmt.Errorf("servers: AddNode: %w: no node of the cluster runs", ErrNotRunning)
	}
	c.mu.Lock()
	id := strconv.Itoa(c.nextID)
	c.nextID++
	c.mu.Unlock()
	var nd *RaftNode
	err := retryPorts(2, freePorts, func(ports []int, attempt int) error {
		nd = &RaftNode{
			ID:       id,
			RaftAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
			APIAddr:  fmt.Sprintf("127.0.0.1:%d", ports[1]),
			DataDir:  filepath.Join(c.base, fmt.Sprintf("added-node-%s-attempt%d", id, attempt)),
		}
		if err := os.MkdirAll(nd.DataDir, 0o700); err != nil {
			return err
		}
		nd.proc = &proc{
			log:  c.log,
			name: fmt.Sprintf("raftlock[%s %s]", id, nd.APIAddr),
			path: c.bin,
			args: append([]string{"node", "--id", id, "--data-dir", nd.DataDir,
				"--raft-addr", nd.RaftAddr, "--api-addr", nd.APIAddr, "--join", seed}, args...),
			dir:   nd.DataDir,
			ports: ports,
		}
		if err := nd.proc.start(); err != nil {
			return err
		}
		c.mu.Lock()
		c.added = append(c.added, nd)
		c.mu.Unlock()
		if err := waitAll(ctx, time.Now().Add(readyTimeout), []*proc{nd.proc}, []func() error{nd.isVoter}); err != nil {
			nd.proc.stop()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("servers: AddNode: %w", err)
	}
	return nd, nil
}

// isVoter reports nil once the node knows a leader and lists itself among
// the voters.
func (nd *RaftNode) isVoter() error {
	pl, err := nd.peers()
	if err != nil {
		return err
	}
	if pl.LeaderID == "" || !slices.Contains(pl.Voters, nd.ID) {
		return fmt.Errorf("leader %q, voters %v: not yet a voter", pl.LeaderID, pl.Voters)
	}
	return nil
}

// Leader returns the node that the cluster reports as its leader, or nil
// when no running node knows one.
func (c *Raftlock) Leader() *RaftNode {
	for _, nd := range c.Nodes {
		if nd.PID() == 0 {
			continue
		}
		pl, err := nd.peers()
		if err != nil || pl.LeaderID == "" {
			continue
		}
		for _, l := range c.Nodes {
			if l.ID == pl.LeaderID {
				return l
			}
		}
	}
	return nil
}

// peerList is the part of raftlock's PeerList (GET /v1/cluster/peers) that
// this package reads; it does not import the backend it starts.
type peerList struct {
	LeaderID string   `json:"leaderId"`
	Voters   []string `json:"voters"`
}

func (nd *RaftNode) peers() (*peerList, error) {
	resp, err := healthClient.Get("http://" + nd.APIAddr + "/v1/cluster/peers")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	if err != nil {
		return nil, err
	}
	var pl peerList
	if err := json.Unmarshal(body, &pl); err != nil {
		return nil, fmt.Errorf("/v1/cluster/peers: %s: %v", resp.Status, err)
	}
	return &pl, nil
}

// formed reports nil once the node knows a leader and n voters.
func (nd *RaftNode) formed(n int) error {
	pl, err := nd.peers()
	if err != nil {
		return err
	}
	if pl.LeaderID == "" || len(pl.Voters) != n {
		return fmt.Errorf("leader %q, %d of %d voters", pl.LeaderID, len(pl.Voters), n)
	}
	return nil
}

// ready reports nil once the node knows a leader.
func (nd *RaftNode) ready() error {
	pl, err := nd.peers()
	if err != nil {
		return err
	}
	if pl.LeaderID == "" {
		return fmt.Errorf("no leader known")
	}
	return nil
}

// PID returns the process ID of the running node, or 0.
func (nd *RaftNode) PID() int { return nd.proc.pid() }

// Stop shuts the node down cleanly (SIGTERM; SIGKILL after stopTimeout).
func (nd *RaftNode) Stop() { nd.proc.stop() }

// Kill sends SIGKILL and returns once the process is reaped.
func (nd *RaftNode) Kill() { nd.proc.kill() }

// Restart starts the node again from its data directory on the same
// addresses (stopping it first if it runs) and returns once it knows a
// leader, which needs a quorum of the cluster running.
func (nd *RaftNode) Restart() error { return nd.proc.restart("RaftNode.Restart", nd.ready) }

// Pause freezes the node with SIGSTOP; Resume continues it. Both fail with
// ErrNotRunning if the node is not running.
func (nd *RaftNode) Pause() error  { return nd.proc.pause() }
func (nd *RaftNode) Resume() error { return nd.proc.resume() }
