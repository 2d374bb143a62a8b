package raftlock

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
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

// TestShutdownAnswersQueuedApplies: entries still queued for the Raft
// leader when its node shuts down are answered (ErrClosed), not left
// waiting for ever. hashicorp/raft drops such futures unanswered
// (hashicorp/raft#498); a leader's takeover blocked on one hung Shutdown,
// and with it CI.
func TestShutdownAnswersQueuedApplies(t *testing.T) {
	c := startCluster(t, 1)
	l := leader(t, c)
	const writers = 64
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	started := make(chan struct{}, writers)
	for i := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			started <- struct{}{}
			for {
				_, err := l.apply(fsm.Entry{Ops: []fsm.Op{{Type: fsm.OpSetMember, Key: "w" + strconv.Itoa(i), Value: []byte("x")}}}, time.Second)
				if err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	for range writers {
		<-started
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); c.Shutdown() }()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("applies queued at shutdown were never answered")
	}
	<-stopped
	close(errs)
	for err := range errs {
		if !errors.Is(err, lock.ErrClosed) && !errors.Is(err, lock.ErrNotLeader) {
			t.Errorf("an apply cut off by shutdown: %v, want ErrClosed (or a redirect)", err)
		}
	}
}

// TestAwaitUnansweredFuture: a future raft never answers ends the wait at
// the node's shutdown, or at the timeout.
func TestAwaitUnansweredFuture(t *testing.T) {
	n := &Node{shutdown: make(chan struct{})}
	if err := n.await(neverFuture{}, 10*time.Millisecond); !errors.Is(err, errAwaitTimeout) {
		t.Errorf("await with a timeout: %v, want errAwaitTimeout", err)
	}
	got := make(chan error, 1)
	go func() { got <- n.await(neverFuture{}, 0) }()
	close(n.shutdown)
	select {
	case err := <-got:
		if !errors.Is(err, raft.ErrRaftShutdown) {
			t.Errorf("await at shutdown: %v, want raft.ErrRaftShutdown", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("await outlived the node's shutdown")
	}
}

type neverFuture struct{}

func (neverFuture) Error() error  { select {} }
func (neverFuture) Index() uint64 { return 0 }

// TestNoPipelinedReplication: the Raft transport refuses pipelines, so
// hashicorp/raft replicates with one request at a time and cannot reach
// its pipeline deadlock (a follower that rejects an append while the
// pipeline is full is never sent another entry, and Shutdown hangs:
// hashicorp/raft#612; it hung TestSnapshot100k here).
func TestNoPipelinedReplication(t *testing.T) {
	c := startCluster(t, 3)
	l := leader(t, c)
	f := followers(c, l)[0]
	p, err := l.trans.AppendEntriesPipeline(raft.ServerID(f.ID()), raft.ServerAddress(f.RaftAddr()))
	if !errors.Is(err, raft.ErrPipelineReplicationNotSupported) {
		if p != nil {
			p.Close()
		}
		t.Fatalf("AppendEntriesPipeline: %v, want ErrPipelineReplicationNotSupported", err)
	}
}
