// Package latency is `lockgate-bench latency`: every backend's workloads
// (sequential, parallel, contended, handoff, affinity, wanted, and the
// read-write, semaphore and multi-key modes) measured side by side,
// directly and through the gateway, with and without the lease cache,
// each set against the physical floor measured on the machine (the disk's
// sync and the loopback round trip); its table, JSON and HTML reports.
package latency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/lock"
)

// Workloads, as `--workload` spells them.
const (
	// Sequential: one client, one key: acquire + release, repeated.
	Sequential = "sequential"
	// Parallel: every client cycles on a key of its own.
	Parallel = "parallel"
	// Contended: every client cycles on the same key; a cycle's latency
	// includes the wait for the lock, ops/s counts acquisitions.
	Contended = "contended"
	// Handoff: the contended workload, measuring from a holder's release
	// to the next waiter's grant.
	Handoff = "handoff"
	// Affinity: each client cycles mostly on keys of its own and now and
	// then on a key every client shares (AffinityConfig): the workload a
	// lease cache serves. ops/s counts acquisitions.
	Affinity = "affinity"
	// Wanted: pairs of clients; the holder of a key waits for its lease's
	// Wanted signal while the waiter queues. Latency is from the waiter's
	// Acquire to the holder seeing Wanted (latency_cache.go).
	Wanted = "wanted"
)

// Workloads lists every workload in report order (RW, Semaphore and
// MultiKey: latency_modes.go).
var Workloads = []string{Sequential, Parallel, Contended, Handoff, Affinity, Wanted, RW, Semaphore, MultiKey}

// Cache settings, as `--cache` spells them: the SDK clients of a gateway
// run connect with client.Options.CacheLeases on or off.
const (
	CacheOn  = "on"
	CacheOff = "off"
)

// Caches lists the cache settings in report order.
var Caches = []string{CacheOff, CacheOn}

// LatencyConfig configures RunLatency.
type LatencyConfig struct {
	Backends  []string
	Workloads []string
	Vias      []string
	// Caches are the lease cache settings (CacheOn, CacheOff; default
	// off). "on" applies to the gateway path only: the direct path has no
	// SDK cache, so direct × on is skipped with a note in Report.Notes.
	Caches []string
	// Affinity shapes the affinity workload; nil: DefaultAffinity().
	Affinity *AffinityConfig
	// Modes shapes the rw, semaphore and multikey workloads; nil:
	// DefaultModes().
	Modes *ModesConfig
	// Clients is the number of clients of the parallel, contended,
	// handoff and affinity workloads (sequential has one), and twice the
	// wanted workload's pairs.
	Clients int
	// Duration is the measured time of each backend × path × workload,
	// split evenly over Rounds.
	Duration time.Duration
	Rounds   int
	// Warmup is how long each backend × path runs the sequential and
	// parallel workloads, unrecorded, before the first round.
	Warmup time.Duration
	// Rate, when positive, makes the loop open: each client starts
	// operations at Rate/Clients per second on a fixed schedule, and a
	// latency counts from the scheduled start (no coordinated omission).
	// Zero: closed loop, each client starts its next operation when the
	// previous one ends.
	Rate float64
	// TTL of the leases taken; long enough that none expires in a cycle.
	TTL time.Duration
	// MinOps, when positive, keeps a round of the closed-loop workloads
	// going past its share of Duration until that many operations have
	// completed, for at most MinOpsWait more: a smoke run's rounds are
	// short enough that on a loaded machine a slow target could complete
	// none. Throughput is over the round's actual length either way.
	MinOps     int64
	MinOpsWait time.Duration
	// FloorDir is where the physical floor's sync is measured; empty: the
	// directory that holds the provisioned raftlock nodes' data
	// directories (Servers.FloorDir).
	FloorDir string
	// Progress receives a progress line per step; nil discards them.
	Progress io.Writer
	// Trace adds raft's traced variant (trace.go): its requests carry a
	// sampled traceparent, which nodes that export traces record. The
	// caller starts the nodes with --otlp-endpoint (TraceSink).
	Trace bool
	// TraceFraction, between 0 and 1 exclusive, makes only that fraction
	// of the traced variant's requests carry the sampled traceparent (a
	// deployment sampling that fraction); otherwise every one does.
	TraceFraction float64
}

func (c *LatencyConfig) fill() error {
	if len(c.Backends) == 0 {
		c.Backends = provision.Ours
	}
	if len(c.Workloads) == 0 {
		c.Workloads = []string{Sequential, Parallel, Contended}
	}
	if len(c.Vias) == 0 {
		c.Vias = []string{provision.Direct}
	}
	if len(c.Caches) == 0 {
		c.Caches = []string{CacheOff}
	}
	if c.Affinity == nil {
		c.Affinity = DefaultAffinity()
	}
	if err := c.Affinity.validate(); err != nil {
		return err
	}
	if c.Modes == nil {
		c.Modes = DefaultModes()
	}
	if err := c.Modes.validate(); err != nil {
		return err
	}
	for _, x := range c.Caches {
		if !slices.Contains(Caches, x) {
			return fmt.Errorf("unknown cache setting %q (want %s)", x, strings.Join(Caches, ", "))
		}
	}
	if slices.Contains(c.Workloads, Wanted) && c.Clients < 2 {
		return fmt.Errorf("clients %d: the wanted workload needs at least 2 (one holder and one waiter per pair)", c.Clients)
	}
	if err := provision.CheckBackends(c.Backends); err != nil {
		return err
	}
	for _, w := range c.Workloads {
		if !slices.Contains(Workloads, w) {
			return fmt.Errorf("unknown workload %q (want %s)", w, strings.Join(Workloads, ", "))
		}
	}
	for _, v := range c.Vias {
		if !slices.Contains(provision.Vias, v) {
			return fmt.Errorf("unknown path %q (want %s)", v, strings.Join(provision.Vias, ", "))
		}
	}
	switch {
	case c.Clients < 1 || c.Clients > 1024:
		return fmt.Errorf("clients %d: want 1 to 1024", c.Clients)
	case c.Rounds < 1 || c.Rounds > 100:
		return fmt.Errorf("rounds %d: want 1 to 100", c.Rounds)
	case c.Duration <= 0:
		return fmt.Errorf("duration %v: want a positive duration", c.Duration)
	case c.Rate < 0:
		return fmt.Errorf("rate %v: want 0 (closed loop) or a positive rate", c.Rate)
	case c.Warmup < 0:
		return fmt.Errorf("warmup %v: want 0 or a positive duration", c.Warmup)
	}
	if c.TTL == 0 {
		c.TTL = 30 * time.Second
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// Report is the outcome of a latency run; its JSON form is the schema of
// `lockgate-bench latency --json`.
type Report struct {
	Machine  provision.Machine `json:"machine"`
	Command  string            `json:"command,omitempty"`
	Rounds   int               `json:"rounds"`
	Duration string            `json:"duration"`
	Rate     float64           `json:"rate,omitempty"`
	// Floor is the physical floor measured in the same run, a round at a
	// time with the backends.
	Floor *Floor `json:"floor"`
	Runs  []*Run `json:"runs"`
	// Notes say what the run left out and why (cache on for the direct
	// path).
	Notes []string `json:"notes,omitempty"`
	// Comparisons set each of our backends beside its peer libraries.
	Comparisons []Comparison `json:"comparisons,omitempty"`
	// CacheComparisons set each cache-on run beside its cache-off run.
	CacheComparisons []CacheComparison `json:"cache_comparisons,omitempty"`
	// ModeComparisons set each rw and semaphore run beside contended,
	// and each multikey run beside its single-key acquires, with their
	// goals.
	ModeComparisons []ModeComparison `json:"mode_comparisons,omitempty"`
}

// Run is the result of one backend × path × workload over all rounds.
type Run struct {
	// Backend is the backend as --backend named it; Variant, Mode, PeerOf
	// and Caps say which mode of it ran and what it guarantees.
	Backend string         `json:"backend"`
	Variant string         `json:"variant"`
	Mode    string         `json:"mode"`
	PeerOf  string         `json:"peer_of,omitempty"`
	Caps    provision.Caps `json:"caps"`
	Via     string         `json:"via"`
	// Cache is the SDK lease cache's setting, CacheOn or CacheOff (every
	// direct run: the backend's own Locker has no cache).
	Cache     string  `json:"cache"`
	Workload  string  `json:"workload"`
	Clients   int     `json:"clients"`
	Ops       int64   `json:"ops"`
	OpsPerSec float64 `json:"ops_per_sec"` // median of the rounds
	// LatencyUS holds medians of the rounds' percentiles, in µs.
	LatencyUS report.Percentiles `json:"latency_us"`
	Errors    int64              `json:"errors"`
	// ErrorKinds counts errors by kind (unavailable, timeout, not_held, …).
	ErrorKinds map[string]int64 `json:"error_kinds,omitempty"`
	// CDF is the latency distribution over all rounds: the latency (µs)
	// at each of cdfQuantiles.
	CDF []CDFPoint `json:"cdf,omitempty"`
	// Note explains something a reader of this run must know.
	Note string `json:"note,omitempty"`
	// Skipped: the run measured nothing, for the reason in Note (the
	// wanted workload on a Locker that does not signal wanted).
	Skipped bool `json:"skipped,omitempty"`
	// Unsupported: skipped because the backend does not offer the
	// workload's primitive (an error matching lock.ErrUnsupported, in
	// Note): shared locks, semaphores or multi-key acquire.
	Unsupported bool `json:"unsupported,omitempty"`
	// Shape is the rw, semaphore or multikey workload's shape ("90%
	// shared", "4 permits", "8 keys").
	Shape string `json:"shape,omitempty"`
	// SingleUS is, for multikey, the latency of a single-key Acquire by
	// the same clients in the same rounds, alternating with AcquireAll
	// (medians of the rounds' percentiles, µs); the run's LatencyUS is
	// AcquireAll's, acquire alone.
	SingleUS *report.Percentiles `json:"single_key_latency_us,omitempty"`
	// CacheStats totals what the clients' lease caches did in the
	// measured rounds (cache on only).
	CacheStats *CacheStats `json:"cache_stats,omitempty"`
	// Signal is the wanted workload's p50 beside its floor.
	Signal *SignalFloor `json:"signal_floor,omitempty"`
	// Floor is the run's p50 and ops/s as multiples of its backend's
	// physical floor.
	Floor *RunFloor `json:"floor,omitempty"`
	// Resources is the CPU and memory the run's servers and the bench
	// process used in its measured rounds.
	Resources *Resources `json:"resources,omitempty"`

	rounds []roundResult
	hist   *hdrhistogram.Histogram
	usage  *runUsage
}

// CDFPoint is one point of a latency CDF.
type CDFPoint struct {
	Quantile  float64 `json:"q"`
	LatencyUS float64 `json:"us"`
}

type roundResult struct {
	ops     int64
	elapsed time.Duration
	pct     report.Percentiles
	single  *report.Percentiles // multikey: the single-key acquires'
}

// cdfQuantiles are the quantiles (in %) of Run.CDF.
var cdfQuantiles = []float64{0, 1, 5, 10, 20, 30, 40, 50, 60, 70, 80, 90, 95, 97, 99, 99.5, 99.9, 99.99, 100}

// RunLatency provisions nothing: it measures the backends of s. Rounds are
// interleaved across backends (round 1: A B C D, round 2: A B C D, …) so
// that drift of the machine hits every backend alike.
func RunLatency(ctx context.Context, s *provision.Servers, cfg LatencyConfig) (*Report, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	rep := &Report{Machine: provision.ReadMachine(), Rounds: cfg.Rounds, Duration: cfg.Duration.String(), Rate: cfg.Rate}
	rep.Floor = &Floor{Dir: cfg.FloorDir}
	if rep.Floor.Dir == "" {
		rep.Floor.Dir = s.FloorDir()
	}
	rep.Floor.FS = fsType(rep.Floor.Dir)

	// One Conn per backend × path × cache, reused by every round and
	// workload.
	var targets []*latencyTarget
	defer func() {
		for _, t := range targets {
			t.conn.Close()
		}
	}()
	for _, via := range cfg.Vias {
		for _, b := range cfg.Backends {
			var mine []*latencyTarget
			for _, cache := range cfg.Caches {
				if cache == CacheOn && via != provision.Gateway {
					rep.noteDirectCache()
					continue
				}
				fmt.Fprintf(cfg.Progress, "connecting %d clients to %s via %s, cache %s\n", cfg.Clients, b, via, cache)
				conn, err := s.ConnectWith(ctx, b, via, cfg.Clients, provision.ConnectOptions{Cache: cache == CacheOn})
				if err != nil {
					return nil, err
				}
				t := &latencyTarget{conn: conn, cache: cache, runs: map[string]*Run{}, sampler: &sampler{s: s}}
				targets = append(targets, t)
				mine = append(mine, t)
				if cfg.traces(b) {
					fmt.Fprintf(cfg.Progress, "connecting %d clients to %s via %s, cache %s, traced\n", cfg.Clients, b, via, cache)
					conn, err := s.ConnectWith(ctx, b, via, cfg.Clients, provision.ConnectOptions{Cache: cache == CacheOn, Propagator: cfg.tracePropagator()})
					if err != nil {
						return nil, err
					}
					t := &latencyTarget{conn: conn, cache: cache, runs: map[string]*Run{}, sampler: &sampler{s: s}, traced: true}
					targets = append(targets, t)
					mine = append(mine, t)
				}
			}
			// Each workload's cache settings side by side.
			for _, w := range cfg.Workloads {
				for _, t := range mine {
					t.runs[w] = newRun(b, via, t.cache, w, cfg.Clients)
					if t.traced {
						t.runs[w].Variant = TraceVariant
					}
					t.runs[w].Shape = cfg.Modes.shape(w)
					rep.Runs = append(rep.Runs, t.runs[w])
				}
			}
		}
	}

	if cfg.Warmup > 0 {
		for _, t := range targets {
			fmt.Fprintf(cfg.Progress, "warm-up %s via %s, cache %s (%v)\n", t.conn.Backend, t.conn.Via, t.cache, cfg.Warmup)
			for _, w := range []string{Sequential, Parallel} {
				if _, err := t.measure(ctx, w, cfg, cfg.Warmup/2, nil); err != nil {
					return nil, err
				}
			}
		}
	}

	per := cfg.Duration / time.Duration(cfg.Rounds)
	steps := cfg.Rounds * len(cfg.Workloads) * len(targets)
	step := 0
	for round := 1; round <= cfg.Rounds; round++ {
		fmt.Fprintf(cfg.Progress, "%s round %d/%d  floor: sync in %s, loopback round trip\n",
			progressBar(step, steps), round, cfg.Rounds, rep.Floor.Dir)
		if err := rep.Floor.measureRound(ctx); err != nil {
			return nil, err
		}
		for _, w := range cfg.Workloads {
			for _, t := range targets {
				step++
				fmt.Fprintf(cfg.Progress, "%s round %d/%d  %-10s %-8s via %-7s cache %s\n",
					progressBar(step-1, steps), round, cfg.Rounds, w, t.conn.Backend, t.conn.Via, t.cache)
				r := t.runs[w]
				if r.Skipped {
					continue
				}
				rr, err := t.measure(ctx, w, cfg, per, r)
				if errors.Is(err, lock.ErrUnsupported) {
					r.Skipped, r.Unsupported = true, true
					r.Note = "unsupported: " + err.Error()
					continue
				}
				if errors.Is(err, errNoWanted) {
					r.Skipped = true
					r.Note = fmt.Sprintf("skipped: the %s Locker via %s does not signal wanted (lock.SignalsWanted is false), so no holder can hear a waiter", r.Backend, r.Via)
					continue
				}
				if err != nil {
					return nil, err
				}
				r.rounds = append(r.rounds, rr)
			}
		}
	}
	fmt.Fprintf(cfg.Progress, "%s done\n", progressBar(steps, steps))
	rep.Floor.summarise(cfg.Backends)
	for _, r := range rep.Runs {
		r.summarise()
		r.Floor = rep.Floor.RunFloor(r)
		r.Signal = rep.Floor.signalFloor(r)
	}
	rep.compare()
	rep.compareTrace()
	rep.compareCache()
	rep.compareModes()
	return rep, nil
}

// newRun is the empty run of backend × via × cache × workload.
func newRun(backend, via, cache, workload string, clients int) *Run {
	info := provision.InfoOf(backend)
	r := &Run{Backend: backend, Variant: info.Variant, Mode: info.Mode, PeerOf: info.PeerOf, Caps: info.Caps,
		Via: via, Cache: cache, Workload: workload, Clients: clientsOf(workload, clients), hist: report.NewHist()}
	if info.Kind == backends.KindRaft && via == provision.Gateway {
		r.Note = "a raftlock node serves the gateway protocol itself: the same path as direct"
	}
	return r
}

func clientsOf(workload string, n int) int {
	switch workload {
	case Sequential:
		return 1
	case Wanted:
		return n - n%2 // pairs
	}
	return n
}

// progressBar draws done of total as a 20-cell bar with a percentage.
func progressBar(done, total int) string {
	const cells = 20
	n := done * cells / max(total, 1)
	return fmt.Sprintf("[%s%s] %3d%%", strings.Repeat("#", n), strings.Repeat(".", cells-n), done*100/max(total, 1))
}

// summarise sets the run's figures from its rounds: percentiles and ops/s
// are medians over the rounds, ops and errors are totals, the CDF comes
// from every round's latencies together.
func (r *Run) summarise() {
	median := func(f func(roundResult) float64) float64 {
		v := make([]float64, len(r.rounds))
		for i, rr := range r.rounds {
			v[i] = f(rr)
		}
		slices.Sort(v)
		if len(v) == 0 {
			return 0
		}
		if len(v)%2 == 1 {
			return v[len(v)/2]
		}
		return (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	for _, rr := range r.rounds {
		r.Ops += rr.ops
	}
	r.OpsPerSec = median(func(rr roundResult) float64 { return float64(rr.ops) / rr.elapsed.Seconds() })
	if len(r.rounds) > 0 && r.rounds[0].single != nil {
		single := func(f func(report.Percentiles) float64) func(roundResult) float64 {
			return func(rr roundResult) float64 { return f(*rr.single) }
		}
		r.SingleUS = &report.Percentiles{
			P50:  median(single(func(p report.Percentiles) float64 { return p.P50 })),
			P90:  median(single(func(p report.Percentiles) float64 { return p.P90 })),
			P99:  median(single(func(p report.Percentiles) float64 { return p.P99 })),
			P999: median(single(func(p report.Percentiles) float64 { return p.P999 })),
			Max:  median(single(func(p report.Percentiles) float64 { return p.Max })),
		}
	}
	r.Resources = r.usage.resources(r.Ops)
	r.LatencyUS = report.Percentiles{
		P50:  median(func(rr roundResult) float64 { return rr.pct.P50 }),
		P90:  median(func(rr roundResult) float64 { return rr.pct.P90 }),
		P99:  median(func(rr roundResult) float64 { return rr.pct.P99 }),
		P999: median(func(rr roundResult) float64 { return rr.pct.P999 }),
		Max:  median(func(rr roundResult) float64 { return rr.pct.Max }),
	}
	if r.hist.TotalCount() > 0 {
		for _, q := range cdfQuantiles {
			r.CDF = append(r.CDF, CDFPoint{Quantile: q, LatencyUS: float64(r.hist.ValueAtQuantile(q))})
		}
	}
}
