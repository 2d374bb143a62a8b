package latency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/lock"
)

// The workloads of the primitives beyond the mutex: read-write locks, semaphores and
// multi-key acquire, each beside the mutex workload of the same shape in
// the same run (ModeComparison).
const (
	// RW: every client cycles on one key, each acquire shared with
	// probability ModesConfig.SharedFraction, else exclusive; ops/s
	// counts acquisitions, set beside contended's.
	RW = "rw"
	// Semaphore: every client cycles on one key, a semaphore of
	// ModesConfig.Permits permits; ops/s counts acquisitions, set beside
	// contended's.
	Semaphore = "semaphore"
	// MultiKey: every client alternates an AcquireAll of
	// ModesConfig.Keys keys of its own (released with ReleaseAll) with a
	// single-key Acquire of another key of its own: disjoint key sets, so
	// the latencies are commit cost, not contention. The run's latency is
	// AcquireAll's alone, Run.SingleUS the single acquire's.
	MultiKey = "multikey"
)

// Defaults of the primitives' workloads, and their goals.
const (
	DefaultSharedFraction = 0.9
	DefaultPermits        = 4
	DefaultMultiKeys      = 8
	// RWGoal: rw's acquisitions/s at least this many times contended's.
	RWGoal = 5.0
	// MultiKeyGoal: AcquireAll's p50 at most this many times a single
	// acquire's.
	MultiKeyGoal = 1.3
)

// ModesConfig shapes the rw, semaphore and multikey workloads.
type ModesConfig struct {
	// SharedFraction is the probability (0 to 1) that an rw acquire is
	// shared.
	SharedFraction float64
	// Permits is the semaphore's N.
	Permits int
	// Keys is how many keys a multikey AcquireAll takes.
	Keys int
}

// DefaultModes is 90 % shared, 4 permits, 8 keys.
func DefaultModes() *ModesConfig {
	return &ModesConfig{SharedFraction: DefaultSharedFraction, Permits: DefaultPermits, Keys: DefaultMultiKeys}
}

func (m *ModesConfig) validate() error {
	switch {
	case !(m.SharedFraction >= 0 && m.SharedFraction <= 1):
		return fmt.Errorf("shared fraction %v: want a probability from 0 to 1", m.SharedFraction)
	case m.Permits < 1 || m.Permits > lock.MaxPermits:
		return fmt.Errorf("permits %d: want 1 to %d", m.Permits, lock.MaxPermits)
	case m.Keys < 1 || m.Keys > lock.MaxMultiKeys:
		return fmt.Errorf("multikey keys %d: want 1 to %d", m.Keys, lock.MaxMultiKeys)
	}
	return nil
}

// shape describes workload w's shape ("" for the other workloads).
func (m *ModesConfig) shape(w string) string {
	switch w {
	case RW:
		return fmt.Sprintf("%.0f%% shared", 100*m.SharedFraction)
	case Semaphore:
		return fmt.Sprintf("%d permits", m.Permits)
	case MultiKey:
		return fmt.Sprintf("%d keys", m.Keys)
	}
	return ""
}

// opts returns the options of each acquire of workload w: base, shared
// with probability SharedFraction (rw) or with Permits permits
// (semaphore).
func (m *ModesConfig) opts(w string, base lock.AcquireOptions) func() lock.AcquireOptions {
	switch w {
	case RW:
		return func() lock.AcquireOptions {
			o := base
			if rand.Float64() < m.SharedFraction {
				o.Mode = lock.ModeShared
			}
			return o
		}
	case Semaphore:
		o := base
		o.Mode, o.Permits = lock.ModeShared, m.Permits
		return func() lock.AcquireOptions { return o }
	}
	return func() lock.AcquireOptions { return base }
}

// modeFeature is the feature workload w needs (0: none).
func modeFeature(w string) lock.Features {
	switch w {
	case RW:
		return lock.FeatureShared
	case Semaphore:
		return lock.FeatureSemaphore
	case MultiKey:
		return lock.FeatureMultiKey
	}
	return 0
}

// runMultiKey runs the multikey workload on conn for d (see MultiKey).
func runMultiKey(ctx context.Context, conn *provision.Conn, cfg LatencyConfig, d time.Duration, r *Run) (roundResult, error) {
	if err := provision.NeedFeature(ctx, conn, lock.FeatureMultiKey); err != nil {
		return roundResult{}, err
	}
	rc := &recorder{hist: report.NewHist(), kinds: map[string]int64{}}
	single := &recorder{hist: report.NewHist(), kinds: map[string]int64{}}
	prefix := fmt.Sprintf("bench/%s/%d/%d", MultiKey, time.Now().UnixNano(), runSeq.Add(1))
	opts := lock.AcquireOptions{TTL: cfg.TTL}

	runCtx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	start := time.Now()
	var unsupported atomic.Pointer[error]
	var wg sync.WaitGroup
	for i, l := range conn.Clients {
		keys := make([]string, cfg.Modes.Keys)
		for k := range keys {
			keys[k] = fmt.Sprintf("%s/%d/%d", prefix, i, k)
		}
		one := fmt.Sprintf("%s/%d/single", prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			release := func(leases ...*lock.Lease) bool {
				// Not bounded by the round: a key left held would
				// stall the next cycle.
				relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				defer relCancel()
				if err := lock.ReleaseAll(relCtx, l, leases); err != nil {
					rc.fail(err)
					return false
				}
				return true
			}
			for runCtx.Err() == nil {
				t0 := time.Now()
				leases, err := lock.AcquireAll(runCtx, l, keys, opts)
				if err != nil {
					if errors.Is(err, lock.ErrUnsupported) {
						unsupported.CompareAndSwap(nil, &err)
						cancel()
						return
					}
					if runCtx.Err() == nil {
						rc.fail(err)
					}
					continue
				}
				lat := time.Since(t0)
				if release(leases...) {
					rc.latency(lat)
					rc.ops.Add(1)
				}
				// Every AcquireAll measured is followed by one single-key
				// acquire, even past the round's end: on a slow backend
				// the round can end while the few cycles it holds are in
				// their single acquires, which would leave no baseline.
				oneCtx, oneCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				t0 = time.Now()
				lease, err := l.Acquire(oneCtx, one, opts)
				oneCancel()
				if err != nil {
					single.fail(err)
					continue
				}
				lat = time.Since(t0)
				if release(lease) {
					single.latency(lat)
					single.ops.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := roundErr(ctx, &unsupported); err != nil {
		return roundResult{}, err
	}
	for k, n := range single.kinds {
		rc.kinds["single "+k] += n
	}
	rr := rc.finish(elapsed, r)
	sp := report.PercentilesOf(single.hist)
	rr.single = &sp
	return rr, nil
}

// ModeComparison sets a run of the primitives' workloads beside its
// baseline of the same shape, same backend, path and cache, in the same
// run (this machine's speed moves 2–3×: ratios, not absolute figures):
// rw and semaphore beside contended (acquisitions/s), multikey beside its
// own single-key acquires (p50).
type ModeComparison struct {
	Workload string `json:"workload"`
	Backend  string `json:"backend"`
	Via      string `json:"via"`
	Cache    string `json:"cache"`
	Shape    string `json:"shape"`
	// Measure names what Value and Base are: "ops/s" (Value the
	// workload's, Base contended's) or "p50 µs" (Value AcquireAll's, Base
	// the single-key acquire's).
	Measure string  `json:"measure"`
	Value   float64 `json:"value"`
	Base    float64 `json:"base"`
	// Ratio is Value over Base.
	Ratio float64 `json:"ratio"`
	// Goal is the bound on Ratio ("≥ 5", "≤ 1.3"; empty: none),
	// Met whether Ratio is within it (nil without a goal).
	Goal string `json:"goal,omitempty"`
	Met  *bool  `json:"met,omitempty"`
}

// compareModes sets each rw, semaphore and multikey run beside its
// baseline.
func (rep *Report) compareModes() {
	rep.ModeComparisons = nil
	for _, r := range rep.Runs {
		if r.Skipped {
			continue
		}
		c := ModeComparison{Workload: r.Workload, Backend: r.ref(), Via: r.Via, Cache: r.Cache, Shape: r.Shape}
		switch r.Workload {
		case RW, Semaphore:
			var base *Run
			for _, b := range rep.Runs {
				if b.Workload == Contended && !b.Skipped && b.Backend == r.Backend && b.Via == r.Via && b.Cache == r.Cache {
					base = b
				}
			}
			if base == nil {
				continue
			}
			c.Measure, c.Value, c.Base = "ops/s", r.OpsPerSec, base.OpsPerSec
			c.Ratio = ratio(c.Value, c.Base)
			if r.Workload == RW {
				met := c.Ratio >= RWGoal
				c.Goal, c.Met = fmt.Sprintf("≥ %g", RWGoal), &met
			}
		case MultiKey:
			if r.SingleUS == nil {
				continue
			}
			c.Measure, c.Value, c.Base = "p50 µs", r.LatencyUS.P50, r.SingleUS.P50
			c.Ratio = ratio(c.Value, c.Base)
			met := c.Ratio > 0 && c.Ratio <= MultiKeyGoal
			c.Goal, c.Met = fmt.Sprintf("≤ %g", MultiKeyGoal), &met
		default:
			continue
		}
		rep.ModeComparisons = append(rep.ModeComparisons, c)
	}
}

// modeRowsHead heads modeRows.
var modeRowsHead = []string{"WORKLOAD", "BACKEND", "VIA", "CACHE", "SHAPE", "MEASURE", "VALUE", "BASELINE", "RATIO", "GOAL", "MET"}

// modeRows are the mode comparisons as rows for a terminal.
func (rep *Report) modeRows() [][]string {
	var rows [][]string
	for _, c := range rep.ModeComparisons {
		base := "contended"
		if c.Workload == MultiKey {
			base = "single key"
		}
		goal, met := "-", "-"
		if c.Met != nil {
			goal, met = c.Goal, "no"
			if *c.Met {
				met = "yes"
			}
		}
		rows = append(rows, []string{c.Workload, c.Backend, c.Via, c.Cache, c.Shape, c.Measure,
			fmt.Sprintf("%.0f", c.Value), fmt.Sprintf("%.0f (%s)", c.Base, base), fmt.Sprintf("%.2f", c.Ratio), goal, met})
	}
	return rows
}

// skipWord is what a skipped run's row says instead of its figures.
func (r *Run) skipWord() string {
	if r.Unsupported {
		return "unsupported"
	}
	return "skipped"
}
