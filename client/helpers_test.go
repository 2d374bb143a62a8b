package client_test

import (
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// quiet is a logger that writes to t.Log only at warn level and above, so
// that a failing test shows what the client saw.
func quiet(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tLogWriter struct{ t testing.TB }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

// startMemGateway serves a gateway over one client of store on a loopback
// port and returns its address (host:port).
func startMemGateway(t testing.TB, store *locktest.MemStore) string {
	t.Helper()
	_, addr := startGatewayOver(t, store.NewLocker())
	return addr
}

// startGatewayOver serves a gateway over l on a loopback port and returns
// it and its address (host:port); l is closed with it.
func startGatewayOver(t testing.TB, l lock.Locker) (*gateway.Gateway, string) {
	t.Helper()
	g := gateway.New(l, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	srv := httptest.NewServer(g)
	t.Cleanup(func() {
		g.Close()
		srv.Close()
		l.Close()
	})
	return g, strings.TrimPrefix(srv.URL, "http://")
}

// newClient returns a client of the gateways at addrs, closed when t ends.
func newClient(t testing.TB, addrs []string, opts client.Options) *client.Client {
	t.Helper()
	if opts.Logger == nil {
		opts.Logger = quiet(t)
	}
	c, err := client.New(addrs, opts)
	if err != nil {
		t.Fatalf("client.New(%v): %v", addrs, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startRaft starts a three-node raftlock cluster with the gateway mounted on
// every node's API address, stopped when t ends.
func startRaft(t testing.TB) *raftlock.LocalCluster {
	t.Helper()
	return startRaftN(t, 3)
}

// startRaftN starts an n-node raftlock cluster with the gateway mounted on
// every node's API address, stopped when t ends.
func startRaftN(t testing.TB, n int) *raftlock.LocalCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, n, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout = time.Second
		cfg.ElectionTimeout = time.Second
		cfg.LeaderLeaseTimeout = 500 * time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.RaftLogOutput = io.Discard
	})
	if err != nil {
		t.Fatalf("starting a raftlock cluster: %v", err)
	}
	for _, s := range c.Servers {
		raftgw.Serve(s, gateway.Options{Logger: slog.New(slog.DiscardHandler)})
	}
	t.Cleanup(c.Shutdown)
	return c
}

// apiAddrs are the gateways' addresses of the cluster's running servers.
func apiAddrs(c *raftlock.LocalCluster) []string {
	var a []string
	for _, s := range c.Servers {
		if s != nil {
			a = append(a, s.APIAddr())
		}
	}
	return a
}

// raftLeader waits for the cluster's ready leader, and for every follower
// to know its address (the member directory commits right after the
// election).
func raftLeader(t testing.TB, c *raftlock.LocalCluster) *raftlock.Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		for {
			if _, addr := n.Leader(); addr == l.APIAddr() {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("node %s never learned the leader's address", n.ID())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return l
}
