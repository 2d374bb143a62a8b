package raftlock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// TestFollowerForgetsSilentLeader: once the leader goes silent (cut off
// from both followers, which to them is a crash), a follower stops naming
// it as soon as it has not heard from it within leaderContactBound, instead
// of until its own election starts (hashicorp/raft keeps the hint one to
// two heartbeat timeouts): a client would spend its redirects on a dead
// address. The check is against the follower's own last contact, read
// around each answer, so a slow machine cannot fail it: an answer that
// names the old leader must have been computed while the contact was fresh.
func TestFollowerForgetsSilentLeader(t *testing.T) {
	c := startCluster(t, 3)
	old := leader(t, c)
	fs := followers(c, old)
	f := fs[0]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The hint works while the leader is alive: the follower names it.
	for {
		_, err := f.Inspect(ctx, "k")
		var nl *lock.NotLeaderError
		if errors.As(err, &nl) && nl.LeaderID == old.ID() && nl.LeaderAddr == old.APIAddr() {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the follower never named the live leader %s: %v", old.ID(), err)
		}
		time.Sleep(10 * time.Millisecond)
	}

	bound := f.leaderContactBound()
	partition(old, fs, true)
	defer partition(old, fs, false)
	cut := time.Now()
	var named, unnamed, stale int
poll:
	for {
		asked := time.Now()
		_, err := f.Inspect(ctx, "k")
		last := f.Raft().LastContact() // does not advance: the leader is cut off
		var nl *lock.NotLeaderError
		if !errors.As(err, &nl) {
			t.Logf("the follower answered %v after %v: it leads now", err, time.Since(cut))
			break
		}
		switch {
		case nl.LeaderID == old.ID():
			named++
			if silent := asked.Sub(last); silent > bound {
				stale++
				if stale == 1 {
					t.Errorf("%v after the cut the follower still named the silent leader, %v after its last contact (bound %v)", asked.Sub(cut), silent, bound)
				}
			}
		case nl.LeaderID == "":
			unnamed++
			if nl.LeaderAddr != "" {
				t.Fatalf("no leader id but an address: %+v", nl)
			}
		default:
			t.Logf("the follower names the new leader %s %v after the cut", nl.LeaderID, time.Since(cut))
			if nl.LeaderID == old.ID() || nl.LeaderAddr == old.APIAddr() {
				t.Fatalf("new leader %+v is the old one", nl)
			}
			break poll
		}
		if ctx.Err() != nil {
			t.Fatalf("no new leader within a minute of the cut (%d answers named the old one, %d none)", named, unnamed)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d answers named the silent leader (%d past the bound), %d named none", named, stale, unnamed)
	if ok, _ := f.Leader(); ok == old.ID() {
		t.Errorf("Leader() still names the old leader %s", old.ID())
	}
}

// TestRejoinedFollowerNamesLeader: a leader cut off from its peers keeps
// appending entries nobody commits; when the cut heals, the new leader walks
// its diverging log back one entry a round trip, and the old leader, now a
// follower, rejects every append until the logs meet. hashicorp/raft's
// LastContact counts only accepted appends, but the new leader is alive and
// talking all along: the follower must name it, not answer "no leader known"
// for as long as the walk-back lasts.
func TestRejoinedFollowerNamesLeader(t *testing.T) {
	c := startCluster(t, 3)
	old := leader(t, c)
	fs := followers(c, old)
	partition(old, fs, true)
	healed := false
	defer func() {
		if !healed {
			partition(old, fs, false)
		}
	}()
	// Entries only the cut-off leader has: each is appended to its log
	// and never committed.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	var wg sync.WaitGroup
	for i := range 3000 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			old.AppendData(ctx, fmt.Sprintf("lost/%d", i), []byte("x"))
		}()
	}
	wg.Wait()
	cancel()
	// A new leader among the others, with an entry of its own term.
	nl := waitLeader(t, fs)
	if err := nl.AppendData(context.Background(), "kept", []byte("y")); err != nil {
		t.Fatal(err)
	}
	partition(old, fs, false)
	healed = true
	var named, unnamed int
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) {
		switch id, _ := old.Leader(); id {
		case nl.ID():
			named++
		case "":
			unnamed++
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("after the heal the old leader named %s %d times, none %d times", nl.ID(), named, unnamed)
	// The first append arrives within a heartbeat interval; allow a
	// second for a loaded machine.
	if time.Duration(unnamed)*5*time.Millisecond > time.Second {
		t.Errorf("the rejoined follower named no leader for %v of the 3 s after the heal, although %s led and sent it appends", time.Duration(unnamed)*5*time.Millisecond, nl.ID())
	}
}

// waitLeader waits for one of ns to lead and returns it.
func waitLeader(t *testing.T, ns []*Node) *Node {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		for _, n := range ns {
			if n.IsLeader() {
				return n
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatal("no leader among the others within 30 s")
	return nil
}
