package raftlock

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// Server is a Node with its API address served over HTTP: the membership
// endpoints now, and whatever else is mounted on Mux (the gateway).
type Server struct {
	*Node
	Mux  *http.ServeMux
	http *http.Server
	ln   net.Listener
}

// StartServer listens on cfg.APIAddr (port 0 picks a free port, which then
// becomes the advertised API address), starts the node, serves its API, and,
// when join lists seed API addresses, asks the cluster to add it, retrying
// until ctx ends.
func StartServer(ctx context.Context, cfg Config, join []string) (*Server, error) {
	cfg.fill()
	ln, err := net.Listen("tcp", cfg.APIAddr)
	if err != nil {
		return nil, fmt.Errorf("raftlock: API listen on %s: %w", cfg.APIAddr, err)
	}
	cfg.APIAddr = ln.Addr().String()
	n, err := New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{Node: n, Mux: http.NewServeMux(), ln: ln}
	s.Mux.Handle("/v1/cluster/", n.Handler())
	s.http = &http.Server{Handler: s.Mux, ReadHeaderTimeout: 10 * time.Second}
	go s.http.Serve(ln)
	if len(join) > 0 {
		args := JoinArgs{ServerID: cfg.ID, ServerAddr: n.RaftAddr(), APIAddr: cfg.APIAddr}
		for {
			_, err := Join(ctx, join, args)
			if err == nil {
				break
			}
			n.log.Info("join: retrying", "seeds", join, "err", err)
			select {
			case <-ctx.Done():
				s.Shutdown()
				return nil, fmt.Errorf("raftlock: joining %v: %w", join, errors.Join(err, ctx.Err()))
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return s, nil
}

// Shutdown stops serving the API, then the node.
func (s *Server) Shutdown() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
	return s.Node.Shutdown()
}

// WaitLeader waits until some node of nodes is a ready leader.
func WaitLeader(ctx context.Context, nodes ...*Node) (*Node, error) {
	for {
		for _, n := range nodes {
			if n != nil && n.IsLeader() {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("raftlock: no leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// LocalCluster is a cluster of Servers in one process (`lockgate cluster`,
// tests, benchmarks). Node i has id "i" and data dir DIR/node-i; node 1
// bootstraps and the others join it.
type LocalCluster struct {
	Servers []*Server
}

// StartLocalCluster starts size servers under dataDir and waits for a
// leader. configure, if not nil, adjusts each node's Config (addresses,
// timing) before it starts.
//
// If dataDir already holds the cluster (a restart), every node starts from
// its own state at once and none joins: a lone first node could not elect
// itself in a cluster that already has several members.
func StartLocalCluster(ctx context.Context, size int, dataDir string, configure func(*Config)) (*LocalCluster, error) {
	c := &LocalCluster{}
	_, err := os.Stat(filepath.Join(dataDir, "node-1"))
	restart := err == nil
	for i := 1; i <= size; i++ {
		cfg := DefaultConfig(strconv.Itoa(i))
		cfg.DataDir = filepath.Join(dataDir, "node-"+cfg.ID)
		cfg.Bootstrap = i == 1
		if configure != nil {
			configure(&cfg)
		}
		var join []string
		if i > 1 && !restart {
			if _, err := WaitLeader(ctx, c.Nodes()...); err != nil {
				c.Shutdown()
				return nil, err
			}
			join = []string{c.Servers[0].APIAddr()}
		}
		s, err := StartServer(ctx, cfg, join)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	if _, err := WaitLeader(ctx, c.Nodes()...); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// Nodes returns the running nodes.
func (c *LocalCluster) Nodes() []*Node {
	var ns []*Node
	for _, s := range c.Servers {
		if s != nil {
			ns = append(ns, s.Node)
		}
	}
	return ns
}

// Leader waits for and returns the ready leader.
func (c *LocalCluster) Leader(ctx context.Context) (*Node, error) {
	return WaitLeader(ctx, c.Nodes()...)
}

// Shutdown stops every server.
func (c *LocalCluster) Shutdown() {
	for _, s := range c.Servers {
		if s != nil {
			s.Shutdown()
		}
	}
}
