package campaign

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/internal/benchtest"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// asShared grants every acquire as a shared one: a workload that asked
// for an exclusive lease (or an election campaign) believes it holds the
// key alone.
func asShared(l *locktest.MemLocker) lock.Locker {
	return &wrapped{MemLocker: l, acquire: func(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
		opts.Mode = lock.ModeShared
		return l.Acquire(ctx, key, opts)
	}}
}

// TestChaosModes runs the campaign's rw and semaphore modes against the
// reference MemStore, which keeps every promise of the modes, and against
// broken variants that must be caught: an exclusive acquire granted as a
// shared one (a writer among readers), and a semaphore that grants one
// permit more than asked.
func TestChaosModes(t *testing.T) {
	// onePermitMore grants N+1 permits to holders that asked for N.
	onePermitMore := func(l *locktest.MemLocker) lock.Locker {
		return &wrapped{MemLocker: l, acquire: func(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
			if opts.Permits > 0 {
				opts.Permits++
			}
			return l.Acquire(ctx, key, opts)
		}}
	}
	cases := []struct {
		name   string
		cfg    ChaosConfig
		wrap   func(*locktest.MemLocker) lock.Locker
		broken bool
	}{
		{"rw", ChaosConfig{Mode: ChaosRW, SharedFraction: 0.7}, nil, false},
		{"rw, writer granted as a reader", ChaosConfig{Mode: ChaosRW, SharedFraction: 0.5, Hold: 40 * time.Millisecond}, asShared, true},
		{"semaphore", ChaosConfig{Mode: ChaosSemaphore, Permits: 2}, nil, false},
		{"semaphore, a permit too many", ChaosConfig{Mode: ChaosSemaphore, Permits: 2, Hold: 40 * time.Millisecond}, onePermitMore, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := memCampaign(t, tc.cfg, tc.wrap)
			benchtest.LogTable(t, rep)
			if rep.Holds != tc.cfg.Mode || rep.SharedKeys != 1 || rep.LinearizabilityKeys != 0 {
				t.Errorf("holds %q, shared keys %d, linearizability keys %d; want %q, 1, 0", rep.Holds, rep.SharedKeys, rep.LinearizabilityKeys, tc.cfg.Mode)
			}
			failures := rep.Failures()
			if !tc.broken {
				if len(failures) > 0 || rep.Overlaps != 0 {
					t.Errorf("a correct lock failed: %q (overlaps %d: %q)", failures, rep.Overlaps, rep.OverlapExamples)
				}
				return
			}
			if rep.Overlaps == 0 || len(failures) == 0 || !strings.HasPrefix(failures[0], "overlaps") {
				t.Errorf("the broken lock passed: overlaps %d, failures %q", rep.Overlaps, failures)
			}
			if tc.cfg.Mode == ChaosSemaphore && rep.PermitExcess == 0 {
				t.Errorf("a permit too many: permit excess 0 (overlaps %d: %q)", rep.Overlaps, rep.OverlapExamples)
			}
		})
	}
}

// TestChaosModeUnsupported: a campaign whose mode the backend does not
// offer fails at once with an error matching lock.ErrUnsupported.
func TestChaosModeUnsupported(t *testing.T) {
	store := locktest.NewMemStoreWithFeatures(0)
	cfg := ChaosConfig{Backend: provision.Raft, Mode: ChaosRW, Clients: 2, Keys: 1, TTL: time.Second, Duration: time.Second, Dir: t.TempDir()}
	_, err := RunChaosLockers(context.Background(), cfg, func(int) (lock.Locker, error) { return store.NewLocker(), nil })
	if !errors.Is(err, lock.ErrUnsupported) {
		t.Fatalf("%v, want an error matching lock.ErrUnsupported", err)
	}
}
