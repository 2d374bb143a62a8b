package campaign

// The campaign's checkers, each shown to fail: the whole campaign (the
// workload's clients, the fault schedule, the fenced store, the checkers)
// runs against an in-memory lock (lock/locktest's MemStore) and against a
// broken variant of it, or with a broken store, and the checker named for
// the defect must catch it while the correct run stays clean.

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
	"github.com/lockgate/lockgate/lock/locktest"
)

// memCampaign runs a short campaign (4 clients on one key, TTL 1 s, or
// 200 ms under client pauses) of
// lockers that wrap, when wrap is not nil, MemStore's lockers.
func memCampaign(t *testing.T, cfg ChaosConfig, wrap func(*locktest.MemLocker) lock.Locker) *ChaosReport {
	t.Helper()
	store := locktest.NewMemStore()
	if cfg.Backend == "" {
		cfg.Backend = provision.Raft // a lock with fencing tokens
	}
	cfg.Seed = 1
	cfg.Clients, cfg.Keys = 4, 1
	if cfg.TTL == 0 {
		// A second: a client checks its deadline and then writes, and
		// on a loaded machine the scheduler can put more than a 200 ms
		// lease's drift allowance (4 ms) between the two — a real late
		// write, which the checkers rightly count. Client pauses keep
		// 200 ms, so that their 1.5 × TTL stalls fit the campaign.
		cfg.TTL = time.Second
		if slices.Contains(cfg.Faults, faults.ClientPause) {
			cfg.TTL = 200 * time.Millisecond
		}
	}
	if cfg.Duration == 0 {
		cfg.Duration = 2 * time.Second
	}
	cfg.Dir = t.TempDir()
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
	if rep.Cycles < 5 {
		t.Fatalf("%d cycles: too few to judge", rep.Cycles)
	}
	return rep
}

// wrapped passes everything to its MemLocker but what a broken lock
// overrides.
type wrapped struct {
	*locktest.MemLocker
	acquire func(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error)
	release func(ctx context.Context, lease *lock.Lease) error
}

func (w *wrapped) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	if w.acquire != nil {
		return w.acquire(ctx, key, opts)
	}
	return w.MemLocker.Acquire(ctx, key, opts)
}

func (w *wrapped) Release(ctx context.Context, lease *lock.Lease) error {
	if w.release != nil {
		return w.release(ctx, lease)
	}
	return w.MemLocker.Release(ctx, lease)
}

func failures(rep *ChaosReport) []string { return rep.Failures() }

// TestChaosCorrectLockPasses: the in-memory reference lock passes every
// checker, with and without client pauses (which must show overlaps the
// fence catches: the campaign is then valid).
func TestChaosCorrectLockPasses(t *testing.T) {
	rep := memCampaign(t, ChaosConfig{}, nil)
	if rep.Overlaps != 0 || rep.StaleWritesAccepted != 0 || rep.TokensReused != 0 || rep.TokenRegressions != 0 ||
		!rep.Linearizable || rep.TokenCheck != "checked" || len(rep.Failures()) != 0 {
		t.Errorf("correct lock: %q", rep.Verdicts())
	}
	rep = memCampaign(t, ChaosConfig{Faults: []string{faults.ClientPause}}, nil)
	if rep.Overlaps == 0 || rep.StaleWritesRejected == 0 || rep.StaleWritesAccepted != 0 || !rep.Linearizable ||
		!rep.Valid || len(rep.Failures()) != 0 || len(rep.Injected) == 0 {
		t.Errorf("correct lock, client pauses: %q (%d injected)", rep.Verdicts(), len(rep.Injected))
	}
}

// TestChaosOverlapCheckerFails: a lock that sometimes grants a held key
// from a stale view of it (as a lagging replica would) shows overlaps.
func TestChaosOverlapCheckerFails(t *testing.T) {
	var n, stale atomic.Uint64
	rep := memCampaign(t, ChaosConfig{}, func(m *locktest.MemLocker) lock.Locker {
		return &wrapped{MemLocker: m, acquire: func(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
			if n.Add(1)%4 != 0 {
				return m.Acquire(ctx, key, opts)
			}
			// The stale view has the key free: grant it at once,
			// with a token above any the store gave.
			return kit.NewLease(kit.Grant{Key: key, Owner: "stale", Token: lock.Token(1<<40 + stale.Add(1)),
				Handle: lock.NewHandle(), TTL: opts.TTL, Sent: time.Now()}), nil
		}}
	})
	if rep.Overlaps == 0 || !slices.ContainsFunc(rep.Failures(), startsWith("overlaps:")) {
		t.Errorf("stale grants: %q", rep.Verdicts())
	}
}

// TestChaosTokenCheckerFails: a lock whose token counter lives in memory
// and restarts from zero every few grants (a server that lost its counter)
// keeps mutual exclusion, and reuses tokens.
func TestChaosTokenCheckerFails(t *testing.T) {
	var mu sync.Mutex
	counter := map[string]lock.Token{}
	grants := 0
	inner := sync.Map{} // the lease handed out → MemStore's lease
	rep := memCampaign(t, ChaosConfig{}, func(m *locktest.MemLocker) lock.Locker {
		return &wrapped{MemLocker: m,
			acquire: func(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
				l, err := m.Acquire(ctx, key, opts)
				if err != nil {
					return nil, err
				}
				mu.Lock()
				if grants++; grants%10 == 0 {
					clear(counter) // the restart
				}
				counter[key]++
				tok := counter[key]
				mu.Unlock()
				out := kit.NewLease(kit.Grant{Key: key, Owner: l.Owner, Token: tok, Handle: l.Handle, TTL: l.TTL(),
					Sent: l.Deadline().Add(-l.TTL())})
				inner.Store(out, l)
				return out, nil
			},
			release: func(ctx context.Context, lease *lock.Lease) error {
				l, ok := inner.LoadAndDelete(lease)
				if !ok {
					return lock.ErrNotHeld
				}
				err := m.Release(ctx, l.(*lock.Lease))
				kit.Released(lease, err == nil)
				return err
			}}
	})
	if rep.TokensReused == 0 || !slices.ContainsFunc(rep.Failures(), startsWith("tokens_reused:")) {
		t.Errorf("restarting token counter: %q", rep.Verdicts())
	}
	if rep.Overlaps != 0 {
		t.Errorf("the token counter's restarts broke mutual exclusion: %d overlaps", rep.Overlaps)
	}
}

// TestChaosLinearizabilityCheckerFails: a lock that acknowledges a release
// it did not perform (the lease had expired and the key was granted to
// another client) is not linearizable. Holds up to 2 × TTL make leases
// expire under their holders; the correct lock answers those releases "not
// held" and stays linearizable.
func TestChaosLinearizabilityCheckerFails(t *testing.T) {
	cfg := ChaosConfig{Hold: 2 * time.Second, Duration: 6 * time.Second}
	rep := memCampaign(t, cfg, nil)
	if !rep.Linearizable || len(rep.Failures()) != 0 {
		t.Errorf("correct lock, long holds: %q", rep.Verdicts())
	}
	if rep.Errors != nil && rep.Errors["release: "+provision.ErrorKind(lock.ErrNotHeld)] != 0 {
		t.Errorf("a \"not held\" release counted as an error: %v", rep.Errors)
	}
	rep = memCampaign(t, cfg, func(m *locktest.MemLocker) lock.Locker {
		return &wrapped{MemLocker: m, release: func(ctx context.Context, lease *lock.Lease) error {
			if err := m.Release(ctx, lease); !errors.Is(err, lock.ErrNotHeld) {
				return err
			}
			return nil // "released"
		}}
	})
	if rep.Linearizable || rep.Linearizability != "Illegal" || !slices.ContainsFunc(rep.Failures(), startsWith("linearizable:")) {
		t.Errorf("acknowledged releases it did not perform: %q", rep.Verdicts())
	}
}

// sloppyStore applies every write whatever its token: a store without a
// fence, in the fenced store's place.
type sloppyStore struct {
	mu  sync.Mutex
	seq uint64
}

func (s *sloppyStore) Write(_ context.Context, req fencedstore.WriteRequest) (fencedstore.WriteResult, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.seq++
	return fencedstore.WriteResult{Seq: s.seq}, nil
}

func (s *sloppyStore) Close() error { return nil }

// TestChaosFenceCheckerFails: clients paused past their TTL write late
// with their old tokens; a store that accepts stale tokens is caught.
func TestChaosFenceCheckerFails(t *testing.T) {
	cfg := ChaosConfig{Faults: []string{faults.ClientPause}, Duration: 3 * time.Second,
		newStore: func(string) (fencedWriter, error) { return &sloppyStore{}, nil }}
	rep := memCampaign(t, cfg, nil)
	if rep.StaleWritesAccepted == 0 || !slices.ContainsFunc(rep.Failures(), startsWith("stale_writes_accepted:")) {
		t.Errorf("a store that accepts stale tokens: %q", rep.Verdicts())
	}
}

// TestChaosHistoryRoundTrip: a failed campaign's history, written out and
// loaded again, gives the same verdicts when the checkers run again.
func TestChaosHistoryRoundTrip(t *testing.T) {
	var n atomic.Uint64
	rep := memCampaign(t, ChaosConfig{Faults: []string{faults.ClientPause}}, func(m *locktest.MemLocker) lock.Locker {
		return &wrapped{MemLocker: m, acquire: func(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
			if n.Add(1)%5 != 0 {
				return m.Acquire(ctx, key, opts)
			}
			return kit.NewLease(kit.Grant{Key: key, Owner: "stale", Token: 1, Handle: lock.NewHandle(), TTL: opts.TTL, Sent: time.Now()}), nil
		}}
	})
	if len(rep.Failures()) == 0 {
		t.Fatalf("the broken lock passed: %q", rep.Verdicts())
	}
	path := filepath.Join(t.TempDir(), "h.json")
	if err := rep.SaveHistory(path); err != nil {
		t.Fatal(err)
	}
	loaded, err := LoadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := loaded.Verdicts(), rep.Verdicts(); !slices.Equal(got, want) {
		t.Errorf("recorded verdicts differ after loading:\n%q\n%q", got, want)
	}
	if got, want := loaded.Recheck().Verdicts(), rep.Verdicts(); !slices.Equal(got, want) {
		t.Errorf("rechecked verdicts:\n%q\nwant\n%q", got, want)
	}
	if len(loaded.history) != len(rep.history) || len(loaded.faults) != len(rep.faults) || loaded.Command != rep.Command {
		t.Errorf("loaded %d ops and %d faults, wrote %d and %d", len(loaded.history), len(loaded.faults), len(rep.history), len(rep.faults))
	}
}

func startsWith(prefix string) func(string) bool {
	return func(s string) bool { return len(s) >= len(prefix) && s[:len(prefix)] == prefix }
}
