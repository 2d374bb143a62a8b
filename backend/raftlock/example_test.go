package raftlock_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/lock"
)

// A three-node raftlock cluster in one process, on free loopback ports:
// every grant is a Raft commit, and its fencing token survives a change
// of leader. Production runs one `lockgate node` per machine instead.
func Example() {
	dir, err := os.MkdirTemp("", "raftlock-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, dir, func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	if err != nil {
		panic(err)
	}
	defer c.Shutdown()

	l := c.Locker() // follows the leader
	defer l.Close()
	lease, err := l.Acquire(ctx, "schema-migration", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println("granted with fencing token", lease.Token)
	if err := l.Release(ctx, lease); err != nil {
		panic(err)
	}
	again, err := l.Acquire(ctx, "schema-migration", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		panic(err)
	}
	fmt.Println("next grant's token is larger:", again.Token > lease.Token)
	// Output:
	// granted with fencing token 1
	// next grant's token is larger: true
}
