package campaign

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// multiCampaign runs a short ChaosMulti campaign (6 clients on 3 keys,
// TTL 1 s, 3 s) of MemStore's lockers, wrapped by wrap when not nil.
func multiCampaign(t *testing.T, wrap func(*locktest.MemLocker) lock.Locker) *ChaosReport {
	t.Helper()
	store := locktest.NewMemStore()
	cfg := ChaosConfig{Backend: provision.Raft, Mode: ChaosMulti, Seed: 1, Clients: 6, Keys: 3,
		TTL: time.Second, Duration: 3 * time.Second, Dir: t.TempDir()}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := RunChaosLockers(ctx, cfg, func(int) (lock.Locker, error) {
		l := store.NewLocker()
		if wrap == nil {
			return l, nil
		}
		return wrap(l), nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Joint == nil || rep.Joint.MultiAcquires < 5 || rep.Joint.Reads < 5 {
		t.Fatalf("too little to judge: %+v", rep.Joint)
	}
	return rep
}

// TestChaosMultiCorrectLockPasses: the in-memory reference lock passes the
// multi campaign, the joint search included.
func TestChaosMultiCorrectLockPasses(t *testing.T) {
	rep := multiCampaign(t, nil)
	if !rep.Joint.Linearizable || len(rep.Failures()) != 0 {
		t.Errorf("correct lock: joint %+v; failures %q", rep.Joint, rep.Failures())
	}
	if !slices.ContainsFunc(rep.Notes, func(n string) bool { return strings.HasPrefix(n, "multi:") }) {
		t.Errorf("no multi note in %q", rep.Notes)
	}
	var shared, permits bool
	for _, o := range rep.history {
		shared = shared || o.Kind == check.Acquire && o.OK && o.Shared && o.Permits == 0
		permits = permits || o.Kind == check.Acquire && o.OK && o.Permits == MultiPermits
	}
	if !shared || !permits {
		t.Errorf("shared grants %v, permits %v: the mix should have both", shared, permits)
	}
}

// oneByOne is a lock whose AcquireAll takes its keys one at a time
// (sorted, so that two never deadlock), holding the first while it waits
// for the next: another client can take a later key in between. Every key
// is still held by one holder at a time, and each key's history alone is
// linearizable: only the joint search can tell.
type oneByOne struct{ *locktest.MemLocker }

func (o oneByOne) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	keys = slices.Sorted(slices.Values(keys))
	var leases []*lock.Lease
	for i, k := range keys {
		lease, err := o.Acquire(ctx, k, opts)
		if err != nil {
			return nil, err
		}
		leases = append(leases, lease)
		if i == 0 {
			time.Sleep(5 * time.Millisecond) // a round trip between the keys
		}
	}
	return leases, nil
}

// TestChaosMultiJointCheckerFails: an AcquireAll that is not atomic fails
// the joint search, and the campaign.
func TestChaosMultiJointCheckerFails(t *testing.T) {
	rep := multiCampaign(t, func(m *locktest.MemLocker) lock.Locker { return oneByOne{m} })
	if rep.Joint.Linearizable || rep.Joint.Result != "Illegal" ||
		!slices.ContainsFunc(rep.Failures(), startsWith("joint_linearizable:")) {
		t.Errorf("one key at a time: joint %+v; failures %q", rep.Joint, rep.Failures())
	}
	if fs := rep.Failures(); len(fs) != 1 || !rep.Linearizable {
		t.Errorf("failures %q (per-key linearizable %v): only the joint search should see it", fs, rep.Linearizable)
	}
	if rep.Overlaps != 0 {
		t.Errorf("%d overlaps: the lock keeps mutual exclusion on each key: %q", rep.Overlaps, rep.OverlapExamples)
	}
}
