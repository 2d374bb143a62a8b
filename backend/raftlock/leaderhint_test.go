package raftlock

import (
	"context"
	"errors"
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
