// Package scale is `lockgate-bench scale`: raftlock (and etcd beside it)
// under many connections, sessions and leases, through idle, load, storm,
// waiter and fault phases, with the servers' memory and commit rates
// sampled along the way.
package scale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/lock"
)

// The scale bench (`lockgate-bench scale`): a three-node cluster
// loaded to a target number of held leases in sessions, plus waiting
// connections, held for a while under a background lock workload, with a
// snapshot, a follower restart, a leader kill and an expiry storm, each
// measured against its goals. RunScale drives the phases; a
// scaleTarget (raftlock through the gateway protocol, or etcd with its own
// session leases) does what each phase means on its backend.

// ScaleConfig configures RunScale.
type ScaleConfig struct {
	// Backend is Raft (raftlock, through the gateway protocol) or Etcd
	// (etcd's own session leases; background workload: zklike).
	Backend string
	// Servers are existing servers (raft: API addresses; etcd: client
	// URLs); empty: a three-node cluster is started (raft: `lockgate
	// node` processes of Lockgate). The process faults (follower restart,
	// leader kill) need provisioned servers.
	Servers  []string
	Lockgate string
	// Leases held, in Sessions sessions, with TTL (default 20 s);
	// Waiters waiting connections on keys of their own (held) and as many
	// on one key (raft only).
	Leases, Sessions, Waiters int
	TTL                       time.Duration
	// Duration is how long the leases are held, quiet, before the faults
	// and the expiry storm.
	Duration time.Duration
	// Idle is how long the background workload runs on the idle cluster
	// (default 5 s).
	Idle time.Duration
	// Background is the background workload's clients (default 4) and
	// BackgroundRate its acquisitions per second in all (default 200).
	Background     int
	BackgroundRate float64
	// SampleEvery is the /metrics sampling interval (default 1 s).
	SampleEvery time.Duration
	// Command is the command line, kept in the report.
	Command string
	// Log receives the servers' output; Progress a line per step.
	Log, Progress io.Writer
}

// Gateway limits the bench spreads its load under (gateway's defaults).
const (
	scaleLeasesPerConn   = 10000
	scaleSessionsPerConn = 64
	scaleBatch           = 64 // keys per AcquireAll
)

func (c *ScaleConfig) fill() error {
	if c.Backend == "" {
		c.Backend = provision.Raft
	}
	if c.Backend != provision.Raft && c.Backend != provision.Etcd {
		return fmt.Errorf("scale: backend %q: want %s or %s", c.Backend, provision.Raft, provision.Etcd)
	}
	if c.TTL == 0 {
		c.TTL = lock.DefaultSessionTTL
	}
	if c.Idle == 0 {
		c.Idle = 5 * time.Second
	}
	if c.Background == 0 {
		c.Background = 4
	}
	if c.BackgroundRate == 0 {
		c.BackgroundRate = 200
	}
	if c.SampleEvery == 0 {
		c.SampleEvery = time.Second
	}
	switch {
	case c.Leases < 1:
		return fmt.Errorf("scale: leases %d: want at least 1", c.Leases)
	case c.Sessions < 1 || c.Sessions > c.Leases:
		return fmt.Errorf("scale: sessions %d: want 1 to the leases (%d)", c.Sessions, c.Leases)
	case (c.Leases+c.Sessions-1)/c.Sessions > scaleLeasesPerConn:
		return fmt.Errorf("scale: %d leases in %d sessions: a session holds at most %d (one connection's)", c.Leases, c.Sessions, scaleLeasesPerConn)
	case c.Waiters < 0 || c.Waiters > c.Leases:
		return fmt.Errorf("scale: waiters %d: want 0 to the leases (%d): each waits on a held key of its own", c.Waiters, c.Leases)
	case c.TTL < 2*time.Second || c.TTL > lock.MaxTTL:
		return fmt.Errorf("scale: ttl %v: want 2s to %v", c.TTL, lock.MaxTTL)
	case c.Duration <= 0:
		return fmt.Errorf("scale: duration %v: want a positive duration", c.Duration)
	case c.Background < 1 || c.Background > 256:
		return fmt.Errorf("scale: background clients %d: want 1 to 256", c.Background)
	case c.BackgroundRate <= 0:
		return fmt.Errorf("scale: background rate %v: want a positive rate", c.BackgroundRate)
	}
	if len(c.Servers) == 0 && c.Backend == provision.Raft && c.Lockgate == "" {
		return errors.New("scale: provisioning raft needs the lockgate binary")
	}
	if c.Log == nil {
		c.Log = io.Discard
	}
	if c.Progress == nil {
		c.Progress = io.Discard
	}
	return nil
}

// Phases of a scale run, as the report names them.
const (
	PhaseIdle    = "idle"    // background workload alone
	PhaseLoading = "loading" // sessions opened, leases acquired
	PhaseWaiters = "waiters" // waiting connections queued, FIFO release
	PhaseLoad    = "load"    // every lease held, renewed, quiet: --duration
	PhaseFaults  = "faults"  // snapshot, follower restart, leader kill
	PhaseSettle  = "settle"  // the last renewal burst, until the storm
	PhaseStorm   = "storm"   // every session's leases expire together
)

// ScalePhases lists the phases in run order.
var ScalePhases = []string{PhaseIdle, PhaseLoading, PhaseWaiters, PhaseLoad, PhaseFaults, PhaseSettle, PhaseStorm}

// scaleTarget is what each phase means on one backend.
type scaleTarget interface {
	// metricsAddrs are the servers whose /metrics the sampler reads, in
	// node order; names label them.
	metricsAddrs() (addrs, names []string)
	// names of the metrics that mean what the report shows.
	metricNames() scaleMetricNames
	// background returns the background workload's clients.
	background(ctx context.Context, n int) ([]lock.Locker, error)
	// load opens the sessions and acquires the leases, keeping the
	// sessions alive from then on.
	load(ctx context.Context, r *scaleRun) error
	// waiters queues the waiting connections and checks the FIFO
	// release (raft only; etcd notes it does not apply).
	waiters(ctx context.Context, r *scaleRun) error
	// snapshot, restartFollower and killLeader are the fault phase.
	snapshot(ctx context.Context, r *scaleRun) error
	restartFollower(ctx context.Context, r *scaleRun) error
	killLeader(ctx context.Context, r *scaleRun) error
	// lost counts the leases and sessions lost so far.
	lost(ctx context.Context, r *scaleRun) (leases, sessions int, err error)
	// stopKeepAlive renews every session once, stops keeping them alive
	// and returns when the last renewal was sent: their leases expire
	// about TTL later.
	stopKeepAlive(ctx context.Context, r *scaleRun) (time.Time, error)
	// renewalsSent is the client's count of keep-alives sent (-1: not
	// counted).
	renewalsSent() int64
	close()
}

// scaleMetricNames name a backend's metrics.
type scaleMetricNames struct {
	leader   func(*promSample) bool
	locks    string // held leases/keys
	sessions string
	renewals func(*promSample) (float64, bool) // renew entries applied so far
	entries  string                            // log entries committed so far
	renewSrc string
}

// scaleRun is one run in progress.
type scaleRun struct {
	cfg ScaleConfig
	rep *ScaleReport
	fds uint64 // the open-files limit of the bench and of the nodes it starts
	// leaderAddr is the address of the leader's last scrape.
	leaderAddr atomic.Pointer[string]
	t          scaleTarget
	prefix     string
	start      time.Time

	phase  atomic.Pointer[phaseRec]
	phases map[string]*phaseRec

	smu     sync.Mutex
	samples []ScaleSample
	last    map[string]*promSample // each server's previous sample
	leader  string                 // the leader's address at the last sample
}

// phaseRec records the background workload's grants in one phase.
type phaseRec struct {
	name  string
	mu    sync.Mutex
	hist  *hdrhistogram.Histogram
	ops   int64
	kinds map[string]int64
	from  time.Time
	to    time.Time
}

func (p *phaseRec) record(d time.Duration) {
	us := min(max(d.Microseconds(), report.HistMin), report.HistMax)
	p.mu.Lock()
	p.hist.RecordValue(us)
	p.ops++
	p.mu.Unlock()
}

func (p *phaseRec) fail(err error) {
	p.mu.Lock()
	p.kinds[provision.ErrorKind(err)]++
	p.mu.Unlock()
}

// enter starts phase name: the background workload records into it, and
// the samples taken from now carry its name.
func (r *scaleRun) enter(name string) {
	now := time.Now()
	if old := r.phase.Load(); old != nil {
		old.mu.Lock()
		old.to = now
		old.mu.Unlock()
	}
	p := &phaseRec{name: name, hist: report.NewHist(), kinds: map[string]int64{}, from: now}
	r.phases[name] = p
	r.phase.Store(p)
	r.progress("phase %s", name)
}

func (r *scaleRun) progress(format string, args ...any) {
	fmt.Fprintf(r.cfg.Progress, "[%6.1fs] %s\n", time.Since(r.start).Seconds(), fmt.Sprintf(format, args...))
}

func (r *scaleRun) note(format string, args ...any) {
	r.smu.Lock()
	r.rep.Notes = append(r.rep.Notes, fmt.Sprintf(format, args...))
	r.smu.Unlock()
}

// RunScale runs the scale bench.
func RunScale(ctx context.Context, cfg ScaleConfig) (*ScaleReport, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	// Each waiter is a connection in the bench and one in the leader;
	// then the holders' connections, the nodes' own, and slack.
	fds, ferr := raiseNoFile(uint64(2*cfg.Waiters) + uint64(cfg.Leases/10000) + 4096)
	if ferr != nil {
		fmt.Fprintf(cfg.Progress, "%v\n", ferr)
	}
	rep := &ScaleReport{Machine: provision.ReadMachine(), Command: cfg.Command, Backend: cfg.Backend, Leases: cfg.Leases,
		Sessions: cfg.Sessions, Waiters: cfg.Waiters, TTLMs: report.Millis(cfg.TTL), DurationS: cfg.Duration.Seconds(),
		Background: cfg.Background, BackgroundRate: cfg.BackgroundRate}
	r := &scaleRun{cfg: cfg, rep: rep, fds: fds, prefix: fmt.Sprintf("scale/%d", time.Now().UnixNano()), start: time.Now(),
		phases: map[string]*phaseRec{}, last: map[string]*promSample{}}
	var err error
	r.progress("starting %s", cfg.Backend)
	switch cfg.Backend {
	case provision.Raft:
		r.t, err = newRaftScale(ctx, &r.cfg)
	case provision.Etcd:
		r.t, err = newEtcdScale(ctx, &r.cfg)
	}
	if err != nil {
		return nil, err
	}
	defer r.t.close()
	rep.Provisioned = len(cfg.Servers) == 0
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	sampled := r.sampleEvery(ctx, cfg.SampleEvery)
	bgDone, err := r.runBackground(ctx)
	if err != nil {
		return nil, err
	}
	stopAll := func() {
		cancel()
		<-bgDone
		<-sampled
	}

	r.enter(PhaseIdle)
	if !provision.SleepCtx(ctx, cfg.Idle) {
		stopAll()
		return nil, ctx.Err()
	}
	idleHeap := r.heapLive(ctx)

	r.enter(PhaseLoading)
	t0 := time.Now()
	if err := r.t.load(ctx, r); err != nil {
		stopAll()
		return nil, err
	}
	rep.LoadSeconds = time.Since(t0).Seconds()
	rep.LoadRate = float64(cfg.Leases) / rep.LoadSeconds
	r.progress("%d leases in %d sessions over %d connections in %.1f s (%.0f leases/s)", cfg.Leases, rep.Sessions, rep.Connections, rep.LoadSeconds, rep.LoadRate)
	rep.HeapIdleBytes = idleHeap
	rep.HeapLoadedBytes = r.heapLive(ctx)
	if rep.HeapIdleBytes > 0 && rep.HeapLoadedBytes > 0 {
		rep.HeapPerLease = (rep.HeapLoadedBytes - rep.HeapIdleBytes) / float64(cfg.Leases)
	}

	if cfg.Waiters > 0 {
		if cfg.Backend == provision.Raft {
			r.enter(PhaseWaiters)
		}
		if err := r.t.waiters(ctx, r); err != nil {
			stopAll()
			return nil, err
		}
	}

	r.enter(PhaseLoad)
	if !provision.SleepCtx(ctx, cfg.Duration) {
		stopAll()
		return nil, ctx.Err()
	}
	heldHeap := r.heapLive(ctx)
	if rep.HeapIdleBytes > 0 && heldHeap > 0 {
		rep.HeapPerLeaseHeld = (heldHeap - rep.HeapIdleBytes) / float64(cfg.Leases)
	}

	r.enter(PhaseFaults)
	for _, f := range []func(context.Context, *scaleRun) error{r.t.snapshot, r.t.restartFollower, r.t.killLeader} {
		if err := f(ctx, r); err != nil {
			if ctx.Err() != nil {
				stopAll()
				return nil, ctx.Err()
			}
			r.note("%v", err)
		}
	}
	// One keep-alive round after the faults before the leases are
	// counted: a session the failover cost shows now.
	if !provision.SleepCtx(ctx, cfg.TTL/3+cfg.TTL/10) {
		stopAll()
		return nil, ctx.Err()
	}
	rep.LostLeases, rep.LostSessions, err = r.t.lost(ctx, r)
	if err != nil {
		r.note("counting lost leases: %v", err)
	}
	r.progress("lost: %d leases, %d sessions", rep.LostLeases, rep.LostSessions)

	r.enter(PhaseSettle)
	burst, err := r.t.stopKeepAlive(ctx, r)
	if err != nil {
		stopAll()
		return nil, err
	}
	if err := r.storm(ctx, burst); err != nil {
		stopAll()
		return nil, err
	}
	stopAll()
	r.finish()
	return rep, nil
}

// storm waits for the leases renewed last at burst to expire, the storm
// phase covering from a second before their TTL until the lock table
// holds no more than the background workload's keys, and a second after.
func (r *scaleRun) storm(ctx context.Context, burst time.Time) error {
	cfg, rep := r.cfg, r.rep
	st := &ScaleStorm{Leases: cfg.Leases}
	rep.Storm = st
	if !provision.SleepCtx(ctx, time.Until(burst.Add(cfg.TTL-time.Second))) {
		return ctx.Err()
	}
	r.enter(PhaseStorm)
	names := r.t.metricNames()
	rest := float64(cfg.Background + 2) // the background keys and the prober's
	deadline := burst.Add(cfg.TTL + 60*time.Second)
	var first time.Time
	startLocks := -1.0
	for time.Now().Before(deadline) {
		s := r.leaderSample(ctx)
		if v, ok := s.get(names.locks); ok {
			if startLocks < 0 {
				startLocks = v
			}
			if first.IsZero() && v < startLocks {
				first = time.Now()
			}
			if v <= rest {
				st.Emptied = true
				break
			}
			st.LocksLeft = v
		} else if s != nil {
			r.note("the leader serves no %s: the storm's end is not observed; it lasts 10 s", names.locks)
			provision.SleepCtx(ctx, 10*time.Second)
			break
		}
		if !provision.SleepCtx(ctx, 100*time.Millisecond) {
			return ctx.Err()
		}
	}
	end := time.Now()
	if !first.IsZero() {
		st.FirstExpiryMs = report.Millis(first.Sub(burst))
		st.WindowMs = report.Millis(end.Sub(first))
	}
	st.EmptiedMs = report.Millis(end.Sub(burst))
	if st.Emptied {
		st.LocksLeft = 0
	}
	provision.SleepCtx(ctx, time.Second)
	return nil
}

// runBackground starts the background workload: cfg.Background clients
// acquiring and releasing keys of their own, BackgroundRate in all, each
// grant's latency recorded in the current phase. The returned channel
// closes when it has stopped (ctx ended).
func (r *scaleRun) runBackground(ctx context.Context) (<-chan struct{}, error) {
	ls, err := r.t.background(ctx, r.cfg.Background)
	if err != nil {
		return nil, err
	}
	done := make(chan struct{})
	interval := time.Duration(float64(time.Second) * float64(len(ls)) / r.cfg.BackgroundRate)
	var wg sync.WaitGroup
	for i, l := range ls {
		key := fmt.Sprintf("%s/bg/%d", r.prefix, i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := time.Now().Add(time.Duration(i) * interval / time.Duration(len(ls)))
			for ctx.Err() == nil {
				if !provision.SleepCtx(ctx, time.Until(next)) {
					return
				}
				next = next.Add(interval)
				if late := time.Since(next); late > 0 {
					next = time.Now() // a stall is not made up with a burst
				}
				p := r.phase.Load()
				t0 := time.Now()
				actx, cancel := context.WithTimeout(ctx, 10*time.Second)
				lease, err := l.Acquire(actx, key, lock.AcquireOptions{TTL: 10 * time.Second})
				cancel()
				if err != nil {
					if ctx.Err() == nil && p != nil {
						p.fail(err)
					}
					continue
				}
				if p != nil {
					p.record(time.Since(t0))
				}
				rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				l.Release(rctx, lease)
				cancel()
			}
		}()
	}
	go func() {
		wg.Wait()
		for _, l := range ls {
			l.Close()
		}
		close(done)
	}()
	return done, nil
}

// finish fills the report's summary from the phases and samples.
func (r *scaleRun) finish() {
	rep := r.rep
	if p := r.phase.Load(); p != nil && p.to.IsZero() {
		p.to = time.Now()
	}
	for _, name := range ScalePhases {
		p := r.phases[name]
		if p == nil {
			continue
		}
		ph := ScalePhase{Name: name, Seconds: p.to.Sub(p.from).Seconds(), Ops: p.ops, ErrorKinds: p.kinds}
		for _, n := range p.kinds {
			ph.Errors += n
		}
		if p.ops > 0 {
			ph.LatencyUS = report.PercentilesOf(p.hist)
		}
		rep.Phases = append(rep.Phases, ph)
	}
	r.smu.Lock()
	rep.Samples = r.samples
	r.smu.Unlock()
	mn := r.t.metricNames()
	rep.RenewalsPerSec, rep.RenewalSource = -1, "not measured: the leader serves no renewal counter"
	if v, ok := phaseRate(rep.Samples, PhaseLoad, func(s ScaleSample) float64 { return s.RenewTotal }); ok {
		rep.RenewalsPerSec, rep.RenewalSource = v, mn.renewSrc
	}
	if v, ok := phaseRate(rep.Samples, PhaseLoad, func(s ScaleSample) float64 { return s.EntriesTotal }); ok {
		rep.EntriesPerSec = v
	}
	if n := r.t.renewalsSent(); n >= 0 {
		rep.KeepAlivesSent = n
	}
	rep.RenewalGoal = float64(rep.Sessions) / (r.cfg.TTL / 3).Seconds()
	rep.goals()
}

// parallel runs f(i) for i in [0, n) on at most workers goroutines and
// returns the first error.
func parallel(ctx context.Context, n, workers int, f func(ctx context.Context, i int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(ctx, i); err != nil {
					cancel(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}
