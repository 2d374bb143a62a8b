// Package soak is the long run of lockgate-bench soak: a three-node
// raftlock cluster (started as the fault campaign starts it, behind
// proxies) under churn of every kind — locks taken, queued for, released
// and left to expire, sessions opened and closed or abandoned with their
// connection, watches opened and closed, connections opened and closed —
// and a calm schedule of faults, each healed, for an hour or more. Every
// node's heap, resident memory, goroutines, open descriptors, and the
// bytes of its Raft log and snapshots on disk are sampled throughout;
// after a warm-up each series' growth is fitted (fit.go) and judged
// against a stated bound: what a leak, or a log that is never compacted,
// would break.
package soak

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/faults"
	"github.com/lockgate/lockgate/bench/provision"
)

// Config configures a soak.
type Config struct {
	// Backend is the backend soaked; only raft (its nodes are the
	// lockgate binary, whose /metrics and data directories the soak
	// reads).
	Backend string
	// Lockgate is the lockgate binary the nodes run.
	Lockgate string
	// Duration is how long the churn runs; Warmup how much of its start
	// is not fitted (0: 10 % of Duration, at least a minute, but never
	// more than half the run).
	Duration, Warmup time.Duration
	// Settle is how much of a restarted node's new process is not fitted.
	Settle time.Duration
	// SampleEvery is the sampling interval.
	SampleEvery time.Duration
	// Clients is the number of concurrent clients; Keys the keys the
	// lockers and watchers share; TTL the leases' and sessions' TTL.
	Clients, Keys int
	TTL           time.Duration
	// Faults are the faults injected, one at a time, every FaultMin to
	// FaultMax; none when empty.
	Faults             []string
	FaultMin, FaultMax time.Duration
	// Bounds overrides DefaultBounds per metric.
	Bounds map[string]Bound
	// Seed seeds the workload and the faults (0: random).
	Seed uint64
	// Log receives the servers' output; Progress a line per fault and
	// sample round. Either may be nil.
	Log, Progress io.Writer
	// Command is the command line, for the report.
	Command string
}

// Warmup returns the warm-up cfg asks for: Warmup, or 10 % of Duration
// but at least a minute, never more than half the run.
func (cfg Config) warmup() time.Duration {
	if cfg.Warmup > 0 {
		return cfg.Warmup
	}
	return min(max(cfg.Duration/10, time.Minute), cfg.Duration/2)
}

func (cfg Config) bound(metric string) Bound {
	if b, ok := cfg.Bounds[metric]; ok {
		return b
	}
	return DefaultBounds[metric]
}

// FaultEvent is one fault: when it was injected and healed (seconds
// since the start), what it did, and the error of its injection or heal.
type FaultEvent struct {
	Name   string  `json:"name"`
	At     float64 `json:"at"`
	Healed float64 `json:"healed"`
	What   string  `json:"what"`
	Err    string  `json:"err,omitempty"`
}

// DefaultFaults is --faults' default: a node killed and restarted, the
// leader paused past the leases' TTL, a node cut from its peers (and half
// the time its clients).
var DefaultFaults = []string{faults.Kill, faults.Pause, faults.Partition}

// Run soaks cfg.Backend's cluster and returns the report; an error only
// when the soak could not run (the verdicts are in the report).
func Run(ctx context.Context, cfg Config) (*Report, error) {
	if cfg.Backend == "" {
		cfg.Backend = provision.Raft
	}
	if cfg.Backend != provision.Raft {
		return nil, fmt.Errorf("soak: backend %q: only raft is soaked (its nodes serve the metrics the soak reads)", cfg.Backend)
	}
	if cfg.Duration <= 0 || cfg.SampleEvery <= 0 || cfg.TTL <= 0 || cfg.Clients < 3 || cfg.Keys < 1 {
		return nil, errors.New("soak: want a positive duration, sample interval and TTL, at least 3 clients and 1 key")
	}
	fnames, err := faults.Expand(cfg.Backend, cfg.Faults)
	if err != nil {
		return nil, err
	}
	if len(fnames) > 0 && (cfg.FaultMin <= 0 || cfg.FaultMax < cfg.FaultMin) {
		return nil, errors.New("soak: want 0 < fault-min <= fault-max")
	}
	for m, b := range cfg.Bounds {
		if _, ok := DefaultBounds[m]; !ok {
			return nil, fmt.Errorf("soak: bound of unknown metric %q (want one of %v)", m, Metrics)
		}
		if b.Cap != DefaultBounds[m].Cap {
			return nil, fmt.Errorf("soak: bound of %s: want a %s", m, map[bool]string{true: "cap", false: "growth"}[DefaultBounds[m].Cap])
		}
	}
	if cfg.Seed == 0 {
		cfg.Seed = rand.Uint64()
	}
	progress := cfg.Progress
	if progress == nil {
		progress = io.Discard
	}
	s, err := provision.Provision(ctx, []string{cfg.Backend}, provision.ProvisionOptions{Lockgate: cfg.Lockgate, Log: cfg.Log, Faults: true})
	if err != nil {
		return nil, err
	}
	defer s.Close()

	rep := &Report{Command: cfg.Command, Backend: cfg.Backend, Duration: cfg.Duration.Seconds(),
		Warmup: cfg.warmup().Seconds(), Settle: cfg.Settle.Seconds(), SampleEvery: cfg.SampleEvery.Seconds(),
		Clients: cfg.Clients, Keys: cfg.Keys, TTL: cfg.TTL.Seconds(), Faults: fnames, Seed: cfg.Seed,
		Bounds: map[string]Bound{}}
	for _, m := range Metrics {
		rep.Bounds[m] = cfg.bound(m)
	}
	for _, nd := range s.RaftProcs.Nodes {
		rep.Nodes = append(rep.Nodes, nd.ID)
	}
	start := time.Now()
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()

	var wg sync.WaitGroup
	w := newWorkload(s.Spec.Raft, cfg.TTL, cfg.Keys)
	wg.Add(1)
	go func() {
		defer wg.Done()
		w.run(runCtx, cfg.Clients, cfg.Seed)
	}()
	var (
		fmu    sync.Mutex
		events []FaultEvent
	)
	if len(fnames) > 0 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(cfg.Seed, 1<<32))
			env := faults.Env{S: s, Pauses: new(atomic.Int32)}
			for provision.SleepCtx(runCtx, provision.Between(rng, cfg.FaultMin, cfg.FaultMax+1)) {
				ev := inject(runCtx, env, cfg, rng, provision.Pick(rng, fnames), start)
				fmt.Fprintf(progress, "%6.0fs fault %s: %s (healed at %.0fs)%s\n", ev.At, ev.Name, ev.What, ev.Healed, errSuffix(ev.Err))
				fmu.Lock()
				events = append(events, ev)
				fmu.Unlock()
			}
		}()
	}

	// Sample at once, then every interval until the end, then once more.
	tick := time.NewTicker(cfg.SampleEvery)
	defer tick.Stop()
	for {
		rep.Samples = append(rep.Samples, sampleAll(ctx, s, start)...)
		if runCtx.Err() != nil {
			break
		}
		select {
		case <-tick.C:
		case <-runCtx.Done():
		}
	}
	wg.Wait()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	rep.Elapsed = time.Since(start).Seconds()
	rep.FaultEvents = events
	rep.Counts = w.counts()
	rep.judge(cfg)
	return rep, nil
}

func errSuffix(err string) string {
	if err == "" {
		return ""
	}
	return ": " + err
}

// inject injects one fault, holds it, and heals it: always, even when the
// run ends during the hold, so that no node is left down or cut.
func inject(ctx context.Context, env faults.Env, cfg Config, rng *rand.Rand, name string, start time.Time) FaultEvent {
	ev := FaultEvent{Name: name, At: time.Since(start).Seconds()}
	f, err := faults.ByName(name)
	if err != nil {
		ev.Err = err.Error()
		return ev
	}
	heal, what, hold, err := f.Inject(cfg.Backend, env, rng, cfg.TTL)
	ev.What = what
	if err != nil {
		ev.Err = "inject: " + err.Error()
		return ev
	}
	provision.SleepCtx(ctx, hold)
	if err := heal(); err != nil {
		ev.Err = "heal: " + err.Error()
	}
	ev.Healed = time.Since(start).Seconds()
	return ev
}

// sampleAll reads every node at once: its /metrics (directly, not
// through the proxy the faults cut) and its data directory.
func sampleAll(ctx context.Context, s *provision.Servers, start time.Time) []Sample {
	nodes := s.RaftProcs.Nodes
	out := make([]Sample, len(nodes))
	t := time.Since(start).Seconds()
	var wg sync.WaitGroup
	for i, nd := range nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			smp := Sample{T: t, Node: nd.ID, PID: nd.PID(), Values: map[string]float64{}}
			var errs []error
			if smp.PID != 0 {
				sctx, cancel := context.WithTimeout(ctx, 3*time.Second)
				errs = append(errs, scrapeNode(sctx, nd.APIAddr, smp.Values))
				cancel()
			} else {
				errs = append(errs, errors.New("not running"))
			}
			if lb, sb, err := diskUsage(nd.DataDir); err != nil {
				errs = append(errs, err)
			} else {
				smp.Values[LogBytes], smp.Values[SnapshotBytes] = lb, sb
			}
			if err := errors.Join(errs...); err != nil {
				smp.Err = err.Error()
			}
			out[i] = smp
		}()
	}
	wg.Wait()
	return out
}

// series is one node's points of one metric, in time order. The disk
// metrics belong to the node, not to its process: their points carry no
// PID, so that a restart does not cut them.
func series(samples []Sample, node, metric string) []Point {
	var pts []Point
	for _, smp := range samples {
		v, ok := smp.Values[metric]
		if smp.Node != node || !ok {
			continue
		}
		p := Point{T: smp.T, V: v}
		if perProcess(metric) {
			p.PID = smp.PID
		}
		pts = append(pts, p)
	}
	slices.SortStableFunc(pts, func(a, b Point) int {
		switch {
		case a.T < b.T:
			return -1
		case a.T > b.T:
			return 1
		}
		return 0
	})
	return pts
}

// ClusterNode names the cluster's total in the verdicts.
const ClusterNode = "all"

// clusterSeries is the sum of a metric over the nodes, one point per round
// of samples in which every node was read. A restart of any node starts a
// new lifetime of the total (its PID is the round's tuple of PIDs, numbered
// in order of appearance), so that FitGrowth settles and centres it as it
// does a node's.
func clusterSeries(samples []Sample, nodes []string, every float64, metric string) []Point {
	if every <= 0 {
		every = 1
	}
	type round struct {
		t    float64
		sum  float64
		pids map[string]int
	}
	rounds := map[int64]*round{}
	for _, smp := range samples {
		v, ok := smp.Values[metric]
		if !ok {
			continue
		}
		k := int64(math.Round(smp.T / every))
		rd := rounds[k]
		if rd == nil {
			rd = &round{t: smp.T, pids: map[string]int{}}
			rounds[k] = rd
		}
		rd.t = min(rd.t, smp.T)
		rd.sum += v
		rd.pids[smp.Node] = smp.PID
	}
	keys := slices.Sorted(maps.Keys(rounds))
	lives := map[string]int{}
	var pts []Point
	for _, k := range keys {
		rd := rounds[k]
		if len(rd.pids) != len(nodes) {
			continue
		}
		var tuple strings.Builder
		for _, n := range nodes {
			fmt.Fprintf(&tuple, "%d,", rd.pids[n])
		}
		life, ok := lives[tuple.String()]
		if !ok {
			life = len(lives) + 1
			lives[tuple.String()] = life
		}
		pts = append(pts, Point{T: rd.t, V: rd.sum, PID: life})
	}
	return pts
}
