package raftlock

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// TestWholeClusterRestart: every node stops and restarts from its disk.
// Locks, their tokens, the fencing counter and data survive, and the next
// token exceeds every earlier one.
func TestWholeClusterRestart(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	raftAddrs := map[string]string{}
	start := func() *LocalCluster {
		c, err := StartLocalCluster(ctx, 3, dir, func(cfg *Config) {
			fastConfig(t)(cfg)
			if a, ok := raftAddrs[cfg.ID]; ok {
				cfg.RaftAddr = a // peers know each other by Raft address
			}
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range c.Nodes() {
			raftAddrs[n.ID()] = n.RaftAddr()
		}
		return c
	}

	c := start()
	l := leader(t, c)
	held := map[string]lock.Token{}
	var maxToken lock.Token
	for i := range 20 {
		key := fmt.Sprintf("k%d", i)
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Hour, Value: []byte(key)})
		if err != nil {
			t.Fatal(err)
		}
		maxToken = max(maxToken, lease.Token)
		if i%2 == 0 { // release half: their tokens were issued and must not come back
			if err := l.Release(ctx, lease); err != nil {
				t.Fatal(err)
			}
			continue
		}
		held[key] = lease.Token
	}
	if err := l.AppendData(ctx, "config", []byte("v1")); err != nil {
		t.Fatal(err)
	}
	// Force a snapshot on one node so that restart replays snapshot + log.
	if err := l.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("snapshot: %v", err)
	}
	c.Shutdown()

	c = start()
	defer c.Shutdown()
	l = leader(t, c)
	for key, tok := range held {
		info, err := l.Inspect(ctx, key)
		if err != nil || info.Token != tok || string(info.Value) != key {
			t.Errorf("after restart Inspect(%q) = %+v, %v; want token %d", key, info, err, tok)
		}
	}
	if _, err := l.Inspect(ctx, "k0"); err == nil {
		t.Error("a released lock is held again after restart")
	}
	if v, err := l.ReadData(ctx, "config"); err != nil || string(v) != "v1" {
		t.Errorf("data after restart: %q, %v", v, err)
	}
	next, err := l.Acquire(ctx, "k0", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= maxToken {
		t.Errorf("first token after restart %d, want > %d (every earlier token)", next.Token, maxToken)
	}
}
