package raftlock

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/lock"
)

// partition cuts the Raft traffic between a and every node of bs, both ways.
func partition(a *Node, bs []*Node, cut bool) {
	for _, b := range bs {
		if cut {
			a.Faults().Partition(b.RaftAddr())
			b.Faults().Partition(a.RaftAddr())
		} else {
			a.Faults().Heal(b.RaftAddr())
			b.Faults().Heal(a.RaftAddr())
		}
	}
}

// TestPartitionedLeader: a leader cut off from the majority stops granting
// within 2× its leader lease timeout; none of its callers receives a grant
// that the majority did not commit; the majority elects a leader and grants.
func TestPartitionedLeader(t *testing.T) {
	c := startCluster(t, 3)
	old := leader(t, c)
	rest := followers(c, old)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	before, err := old.Acquire(ctx, "held-before", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}

	cut := time.Now()
	partition(old, rest, true)
	// Clients keep asking the old leader for fresh keys the whole time.
	var mu sync.Mutex
	var granted []*lock.Lease
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for i := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			s := old.NewSession()
			for j := 0; ; j++ {
				select {
				case <-stop:
					return
				default:
				}
				actx, acancel := context.WithTimeout(ctx, time.Second)
				l, err := s.TryAcquire(actx, fmt.Sprintf("minority-%d-%d", i, j), lock.AcquireOptions{TTL: time.Minute})
				acancel()
				if err == nil {
					mu.Lock()
					granted = append(granted, l)
					mu.Unlock()
				}
				time.Sleep(5 * time.Millisecond)
			}
		}()
	}

	// The old leader steps down on its own (it cannot reach a quorum).
	lease := old.cfg.LeaderLeaseTimeout
	for old.Raft().State() == raft.Leader {
		if time.Since(cut) > 10*time.Second {
			t.Fatal("the partitioned leader never stepped down")
		}
		time.Sleep(time.Millisecond)
	}
	steppedDown := time.Since(cut)
	t.Logf("partitioned leader stepped down %v after the cut (leader lease timeout %v)", steppedDown, lease)
	// hashicorp/raft checks its lease every LeaderLeaseTimeout, so it steps
	// down between 1× and 2× of it; allow scheduling slack on a busy box.
	if steppedDown > 2*lease+time.Second {
		t.Errorf("stepped down after %v, want within 2× the leader lease timeout (%v)", steppedDown, 2*lease)
	}

	nl, err := WaitLeader(ctx, rest...)
	if err != nil {
		t.Fatal(err)
	}
	majority, err := nl.Acquire(ctx, "majority-key", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("the majority's leader does not grant: %v", err)
	}
	if majority.Token <= before.Token {
		t.Errorf("majority token %d, want > %d", majority.Token, before.Token)
	}
	if _, err := nl.TryAcquire(ctx, "held-before", lock.AcquireOptions{TTL: time.Minute}); err == nil {
		t.Error("a lock held before the partition was granted again by the majority")
	}
	close(stop)
	wg.Wait()

	// Whatever the old leader granted must have been committed by the
	// majority: it must be in the new leader's lock table.
	for _, l := range granted {
		fl, ok := nl.fsm.Lock(l.Key)
		if !ok || fl.Token != uint64(l.Token) {
			t.Errorf("the cut-off leader granted %q (token %d) but the majority never committed it", l.Key, l.Token)
		}
	}
	t.Logf("grants by the cut-off leader: %d (all committed by the majority)", len(granted))

	// After healing, the old leader follows and sees the majority's grant.
	partition(old, rest, false)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if l, ok := old.fsm.Lock("majority-key"); ok && l.Token == uint64(majority.Token) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the healed node never caught up with the majority's grant")
		}
		time.Sleep(5 * time.Millisecond)
	}
}
