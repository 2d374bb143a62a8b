package raftlock

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) { s.mu.Lock(); defer s.mu.Unlock(); return s.b.Write(p) }
func (s *syncBuf) String() string              { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// TestShutdownTransfersLeadership: a leader shut down (SIGTERM in `lockgate
// node`) hands leadership to another voter before it stops, the lock it
// granted stays held under the new leader, and the cluster grants again.
func TestShutdownTransfersLeadership(t *testing.T) {
	var logs syncBuf
	c := startCluster(t, 3, func(cfg *Config) {
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	held, err := l.Acquire(ctx, "shutdown", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		if s.Node == l {
			if err := s.Shutdown(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if !strings.Contains(logs.String(), "shutdown: leadership transferred") {
		t.Fatalf("the leader stopped without handing over leadership; its log:\n%s", logs.String())
	}
	nl, err := WaitLeader(ctx, followers(c, l)...)
	if err != nil {
		t.Fatal(err)
	}
	info, err := nl.Inspect(ctx, "shutdown")
	if err != nil || info.Token != held.Token {
		t.Fatalf("after the handover Inspect = %+v, %v; want the lock held with token %d", info, err, held.Token)
	}
	next, err := nl.Acquire(ctx, "shutdown-2", lock.AcquireOptions{TTL: time.Minute})
	if err != nil || next.Token <= held.Token {
		t.Fatalf("acquire on the new leader: %v, token %v after %d", err, next, held.Token)
	}
}
