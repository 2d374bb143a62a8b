package campaign

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestRaftFaultsInjectAndHeal injects each raftlock-specific fault on
// one cluster and heals it at once, and checks after each heal that the
// cluster grants a lock again (and, after membership, that its three
// nodes are the voters again).
func TestRaftFaultsInjectAndHeal(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a raftlock cluster behind proxies")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	var log bytes.Buffer
	tg, err := StartTarget(ctx, provision.Raft, testenv.BuildLockgate(t), &log)
	if err != nil {
		t.Fatal(err)
	}
	defer tg.Close()
	l, _, err := tg.newClient(0)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	rng := rand.New(rand.NewPCG(7, 7))
	names := []string{faults.PartitionLeader, faults.PartitionMajority, faults.PartitionBridge, faults.PartitionOneWay,
		faults.SlowNet, faults.LossyNet, faults.Membership, faults.ClockSmall, faults.ClockBig, faults.KillAll, faults.Restart}
	if provision.CanMountTmpfs() == nil {
		names = append(names, faults.DiskFull)
		if tg.s.RaftDiskDir == "" {
			t.Error("a tmpfs can be mounted, yet node 1 is not on one")
		}
	} else {
		t.Logf("disk-full not exercised: %v", provision.CanMountTmpfs())
	}
	for i, name := range names {
		f, err := faults.ByName(name)
		if err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		heal, what, _, err := f.Inject(provision.Raft, faults.Env{S: tg.s, Pauses: new(atomic.Int32)}, rng, 2*time.Second)
		if err != nil {
			t.Fatalf("injecting %s: %v\n%s", name, err, log.String())
		}
		if err := heal(); err != nil {
			t.Fatalf("healing %s (%s): %v\n%s", name, what, err, log.String())
		}
		key := fmt.Sprintf("fault/%d", i)
		actx, acancel := context.WithTimeout(ctx, 15*time.Second)
		lease, err := l.Acquire(actx, key, lock.AcquireOptions{TTL: 2 * time.Second})
		if err == nil {
			err = l.Release(actx, lease)
		}
		acancel()
		if err != nil {
			t.Fatalf("after %s (%s): %v\n%s", name, what, err, log.String())
		}
		t.Logf("%-18s %s: healed, granting again after %v", name, what, time.Since(start).Round(time.Millisecond))
		if name == faults.Membership {
			pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
			pl, err := raftlock.FetchPeers(pctx, tg.s.RaftProcs.APIAddrs[0])
			pcancel()
			if err != nil {
				t.Fatal(err)
			}
			if v := slices.Sorted(slices.Values(pl.Voters)); !slices.Equal(v, []string{"1", "2", "3"}) {
				t.Errorf("voters after the membership heal: %v, want [1 2 3]", v)
			}
		}
	}
}

// TestRaftFaultsCampaign is the smoke campaign of the newer raftlock
// nemeses that must leave raftlock safe: 15 s with a seeded pick of them;
// no overlap, linearizable, no stale write accepted, and a grant within
// 5 s of every heal.
func TestRaftFaultsCampaign(t *testing.T) {
	if testing.Short() {
		t.Skip("a 15 s fault campaign")
	}
	rep := raftSmokeCampaign(t, 3, faults.PartitionLeader, faults.PartitionBridge, faults.PartitionOneWay, faults.Membership,
		faults.ClockSmall, faults.SlowNet, faults.LossyNet, faults.KillAll)
	if rep.Overlaps != 0 || !linearizableEnough(t, rep) || rep.StaleWritesAccepted != 0 || !rep.Valid {
		t.Errorf("raftlock broke a promise: overlaps %d %v, linearizable %v, stale writes accepted %d, valid %v",
			rep.Overlaps, rep.OverlapExamples, rep.Linearizable, rep.StaleWritesAccepted, rep.Valid)
	}
}
