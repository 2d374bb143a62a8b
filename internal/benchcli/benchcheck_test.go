package benchcli

import (
	"context"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/campaign"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
	"github.com/lockgate/lockgate/lock/locktest"
)

// staleLocker grants every third acquire at once, whoever holds the key.
type staleLocker struct {
	*locktest.MemLocker
	n *atomic.Uint64
}

func (l staleLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	if l.n.Add(1)%3 != 0 {
		return l.MemLocker.Acquire(ctx, key, opts)
	}
	return kit.NewLease(kit.Grant{Key: key, Owner: "stale", Token: lock.Token(1 << 40), Handle: lock.NewHandle(),
		TTL: opts.TTL, Sent: time.Now()}), nil
}

// campaignHistory runs a short campaign on an in-memory lock (broken or
// not) and writes its history; it returns the path and the campaign's
// verdicts.
func campaignHistory(t *testing.T, broken bool) (string, []string) {
	t.Helper()
	store := locktest.NewMemStore()
	var n atomic.Uint64
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rep, err := campaign.RunChaosLockers(ctx, campaign.ChaosConfig{Backend: provision.Raft,
		Duration: 2 * time.Second, Seed: 7, Clients: 4, Keys: 1, TTL: 200 * time.Millisecond, Dir: t.TempDir(),
		Command: "test campaign"},
		func(int) (lock.Locker, error) {
			if broken {
				return staleLocker{store.NewLocker(), &n}, nil
			}
			return store.NewLocker(), nil
		})
	if err != nil {
		t.Fatal(err)
	}
	if broken == (len(rep.Failures()) == 0) {
		t.Fatalf("broken %v, failures %q", broken, rep.Failures())
	}
	path := filepath.Join(t.TempDir(), "history.json")
	if err := rep.SaveHistory(path); err != nil {
		t.Fatal(err)
	}
	return path, rep.Verdicts()
}

// TestBenchCheck: `lockgate-bench check FILE` runs the checkers again on a
// campaign's history and prints the campaign's verdicts; it exits 1 for a
// failed campaign (here: a lock that granted held keys), 0 for a good one.
func TestBenchCheck(t *testing.T) {
	for _, broken := range []bool{true, false} {
		path, verdicts := campaignHistory(t, broken)
		code, out, errOut := run(t, "check", path)
		if want := map[bool]int{true: 1, false: 0}[broken]; code != want {
			t.Errorf("broken %v: exit %d, want %d\n%s\n%s", broken, code, want, out, errOut)
		}
		for _, v := range verdicts {
			if !strings.Contains(out, "verdict  "+v+"\n") {
				t.Errorf("broken %v: the output lacks the campaign's verdict %q:\n%s", broken, v, out)
			}
		}
		if !strings.Contains(out, "the verdicts are the campaign's") || !strings.Contains(errOut, "test campaign") {
			t.Errorf("broken %v: output\n%s\n%s", broken, out, errOut)
		}
		if broken && (!strings.Contains(errOut, "overlaps:") || !strings.Contains(out, "FAILED overlaps:")) {
			t.Errorf("the overlaps are not named:\n%s\n%s", out, errOut)
		}
	}
	if code, _, errOut := run(t, "check", filepath.Join(t.TempDir(), "none.json")); code == 0 || errOut == "" {
		t.Errorf("a missing file: exit %d, %q", code, errOut)
	}
}
