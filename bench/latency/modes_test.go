package latency

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/bench/internal/benchtest"
	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestModesWorkloads runs rw, semaphore and multikey on an in-process lock
// with every primitive: each workload acquires in its mode (rw mostly
// shared and some exclusive, the semaphore never above its permits,
// multikey through AcquireAll beside single acquires), without errors.
func TestModesWorkloads(t *testing.T) {
	ctx := context.Background()
	cfg := LatencyConfig{Clients: 8, Rounds: 1, Duration: time.Second}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{RW, Semaphore, MultiKey} {
		t.Run(w, func(t *testing.T) {
			s := newModeStore()
			conn := modeConn(s, cfg.Clients, lock.AllFeatures)
			r := newRun(provision.Raft, provision.Direct, CacheOff, w, cfg.Clients)
			rr, err := runWorkload(ctx, conn, w, cfg, 300*time.Millisecond, r)
			if err != nil {
				t.Fatal(err)
			}
			r.rounds = append(r.rounds, rr)
			r.summarise()
			if r.Ops == 0 || r.Errors != 0 {
				t.Fatalf("ops %d, errors %d %v", r.Ops, r.Errors, r.ErrorKinds)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			switch w {
			case RW:
				if s.sharedGrants <= s.exclusiveGrants || s.exclusiveGrants == 0 {
					t.Errorf("rw: %d shared and %d exclusive grants, want mostly shared and some exclusive", s.sharedGrants, s.exclusiveGrants)
				}
				if s.maxShared < 2 {
					t.Errorf("rw: at most %d readers at once: the readers never shared the key", s.maxShared)
				}
			case Semaphore:
				if s.exclusiveGrants != 0 || s.sharedGrants == 0 || s.maxShared > cfg.Modes.Permits {
					t.Errorf("semaphore: %d permits and %d exclusive grants, up to %d holders at once (permits %d)",
						s.sharedGrants, s.exclusiveGrants, s.maxShared, cfg.Modes.Permits)
				}
			case MultiKey:
				if s.multiGrants != int(r.Ops) || r.SingleUS == nil || r.SingleUS.P50 <= 0 {
					t.Errorf("multikey: %d AcquireAll grants for %d ops, single-key latency %+v", s.multiGrants, r.Ops, r.SingleUS)
				}
				if s.exclusiveGrants < cfg.Modes.Keys*s.multiGrants {
					t.Errorf("multikey: %d grants for %d AcquireAll of %d keys", s.exclusiveGrants, s.multiGrants, cfg.Modes.Keys)
				}
			}
		})
	}
}

// TestModesUnsupported: on a Locker without the primitive, each workload
// ends its round with an error matching lock.ErrUnsupported (which
// RunLatency turns into an "unsupported" row), having granted nothing.
func TestModesUnsupported(t *testing.T) {
	cfg := LatencyConfig{Clients: 4, Rounds: 1, Duration: time.Second}
	if err := cfg.fill(); err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{RW, Semaphore, MultiKey} {
		s := newModeStore()
		conn := modeConn(s, cfg.Clients, lock.AllFeatures&^modeFeature(w))
		_, err := runWorkload(context.Background(), conn, w, cfg, 200*time.Millisecond, nil)
		if !errors.Is(err, lock.ErrUnsupported) {
			t.Errorf("%s: %v, want an error matching lock.ErrUnsupported", w, err)
		}
		if w != MultiKey && s.sharedGrants+s.exclusiveGrants > 1 { // the feature probe's one grant
			t.Errorf("%s: %d grants on a Locker without the primitive", w, s.sharedGrants+s.exclusiveGrants)
		}
	}
}

// TestCompareModes: rw and semaphore are set beside contended's ops/s,
// multikey beside its single acquires' p50, each against its goal;
// an unsupported run says so in the table and is compared with nothing.
func TestCompareModes(t *testing.T) {
	run := func(w string, ops, p50 float64) *Run {
		r := newRun(provision.Raft, provision.Direct, CacheOff, w, 32)
		r.Shape = DefaultModes().shape(w)
		r.OpsPerSec, r.LatencyUS.P50 = ops, p50
		return r
	}
	multi := func(p50, single float64) *Run {
		r := run(MultiKey, 100, p50)
		r.SingleUS = &report.Percentiles{P50: single}
		return r
	}
	unsupported := run(RW, 0, 0)
	unsupported.Via, unsupported.Skipped, unsupported.Unsupported = provision.Gateway, true, true
	unsupported.Note = "unsupported: lock: not supported by this backend"
	rep := &Report{Runs: []*Run{
		run(Contended, 100, 5000), run(RW, 600, 800), run(Semaphore, 300, 900),
		multi(1200, 1000), unsupported,
	}}
	rep.compareModes()
	want := []struct {
		w     string
		ratio float64
		met   *bool
	}{{RW, 6, ptr(true)}, {Semaphore, 3, nil}, {MultiKey, 1.2, ptr(true)}}
	if len(rep.ModeComparisons) != len(want) {
		t.Fatalf("%d comparisons %+v, want %d", len(rep.ModeComparisons), rep.ModeComparisons, len(want))
	}
	for i, c := range rep.ModeComparisons {
		if c.Workload != want[i].w || c.Ratio < want[i].ratio-1e-9 || c.Ratio > want[i].ratio+1e-9 || (c.Met == nil) != (want[i].met == nil) ||
			(c.Met != nil && *c.Met != *want[i].met) {
			t.Errorf("comparison %d: %+v, want %s ratio %v met %v", i, c, want[i].w, want[i].ratio, want[i].met)
		}
	}
	// Missing the goals.
	rep.Runs[1].OpsPerSec, rep.Runs[3].LatencyUS.P50 = 400, 1400
	rep.compareModes()
	if c := rep.ModeComparisons; *c[0].Met || *c[2].Met {
		t.Errorf("rw at 4× and multikey at 1.4× met their goals: %+v", c)
	}
	table := benchtest.LogTable(t, rep)
	for _, s := range []string{"unsupported", "≥ 5", "≤ 1.3", "90% shared", "8 keys"} {
		if !strings.Contains(table, s) {
			t.Errorf("the table has no %q", s)
		}
	}
}

func ptr[T any](v T) *T { return &v }

// TestModesLatencySmoke runs rw, semaphore and multikey (with contended,
// their baseline) briefly on every backend of ours over both paths: each
// run either measured acquisitions without errors, or says "unsupported"
// (never an error that fails the run); the backends that offer the
// primitives are measured (zklike offers all three: etcd:lease is zklike
// itself) and set beside their baselines.
func TestModesLatencySmoke(t *testing.T) {
	if testing.Short() {
		t.Skip("starts every backend's servers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	backends := append(slices.Clone(smokeBackends), provision.Etcd+":lease")
	s := benchtest.Provision(t, ctx, backends, provision.ProvisionOptions{Lockgate: testenv.BuildLockgate(t)})
	defer s.Close()
	rep, err := RunLatency(ctx, s, LatencyConfig{
		Backends:  backends,
		Workloads: []string{Contended, RW, Semaphore, MultiKey},
		Vias:      provision.Vias,
		Clients:   4,
		Duration:  500 * time.Millisecond,
		// A round goes on past its length until it has an operation (at
		// most 20 s more): on a loaded machine a slow target could
		// complete none in it.
		MinOps: 1, MinOpsWait: 20 * time.Second,
		Rounds:   1,
		Progress: benchtest.Writer(t),
	})
	if err != nil {
		t.Fatal(err)
	}
	benchtest.LogTable(t, rep)
	measured := map[string]int{}
	for _, r := range rep.Runs {
		switch {
		case r.Unsupported:
			if !strings.Contains(r.Note, "not supported") && !strings.Contains(r.Note, "does not offer") {
				t.Errorf("%s via %s %s: unsupported with the note %q", r.Backend, r.Via, r.Workload, r.Note)
			}
		case r.Ops == 0 || !tolerable(r):
			t.Errorf("%s via %s %s: ops %d, errors %d %v", r.Backend, r.Via, r.Workload, r.Ops, r.Errors, r.ErrorKinds)
		default:
			measured[r.Workload]++
			if r.Workload == MultiKey && (r.SingleUS == nil || r.SingleUS.P50 <= 0) {
				t.Errorf("%s via %s multikey: no single-key latency", r.Backend, r.Via)
			}
		}
	}
	for _, w := range []string{RW, Semaphore, MultiKey} {
		if measured[w] == 0 {
			t.Errorf("no backend measured %s", w)
		}
	}
	compared := map[string]int{}
	for _, c := range rep.ModeComparisons {
		compared[c.Workload]++
	}
	if compared[RW] != measured[RW] || compared[Semaphore] != measured[Semaphore] || compared[MultiKey] != measured[MultiKey] {
		t.Errorf("comparisons %v for measured runs %v", compared, measured)
	}
}
