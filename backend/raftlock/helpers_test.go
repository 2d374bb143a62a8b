package raftlock

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"
)

// fastConfig makes a node elect within about a second on loopback, on free
// ports, with logs in t.Log. The timeouts leave room for a busy CI machine
// (packages run in parallel): tighter ones made leadership flap under load.
func fastConfig(t testing.TB) func(*Config) {
	return func(c *Config) {
		c.RaftAddr = "127.0.0.1:0"
		c.APIAddr = "127.0.0.1:0"
		c.HeartbeatTimeout = time.Second
		c.ElectionTimeout = time.Second
		// A leader steps down after LeaderLeaseTimeout without a quorum's
		// answer; at 500 ms, CPU starvation on a loaded 2-core machine
		// (race detector, other packages' tests) deposed leaders mid-test.
		c.LeaderLeaseTimeout = time.Second
		c.CommitTimeout = 5 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(tLogWriter{t}, &slog.HandlerOptions{Level: slog.LevelInfo}))
		c.RaftLogOutput = io.Discard
	}
}

type tLogWriter struct{ t testing.TB }

func (w tLogWriter) Write(p []byte) (int, error) {
	w.t.Helper()
	w.t.Log(string(p[:len(p)-1]))
	return len(p), nil
}

// startCluster starts a local cluster of size nodes in t.TempDir(), stopped
// when the test ends.
func startCluster(t testing.TB, size int, configure ...func(*Config)) *LocalCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := StartLocalCluster(ctx, size, t.TempDir(), func(cfg *Config) {
		fastConfig(t)(cfg)
		for _, f := range configure {
			f(cfg)
		}
	})
	if err != nil {
		t.Fatalf("starting a %d-node cluster: %v", size, err)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// leader waits for the cluster's ready leader.
func leader(t testing.TB, c *LocalCluster) *Node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	n, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
