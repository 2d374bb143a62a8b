package latency

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"slices"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/backends"
)

// The physical floor: what no lock service can beat on this machine. Every
// `lockgate-bench latency` run measures two primitives, once per round
// (interleaved with the backends' rounds, so that the machine's drift hits
// the floor as it hits the backends):
//
//   - sync: a FloorBlock-byte append to a scratch file in the filesystem of
//     the raftlock nodes' data directories, then fdatasync: the cost of
//     making one log write durable;
//   - rtt: a FloorMessage-byte round trip over loopback TCP to an echo
//     server on 127.0.0.1: the cost of one request and its reply.
//
// From their p50s it derives, per backend, the floor of one commit (its
// replication model: FloorModels), of one lock cycle (acquire + release:
// CycleCommits commits and CycleRTTs client round trips) and of one handoff
// (HandoffCommits commit and HandoffRTTs round trip). docs/benchmarks.md
// describes the model and what it ignores.
const (
	// FloorBlock is the size of one measured append: one small log entry
	// batch, the unit hashicorp/raft, etcd and PostgreSQL sync per commit.
	FloorBlock = 4 << 10
	// FloorMessage is the size of one measured loopback message: about a
	// lock request or grant on the wire.
	FloorMessage = 64
	// FloorSyncSamples and FloorRTTSamples are how many of each primitive a
	// round measures, unless FloorBudget runs out first.
	FloorSyncSamples = 200
	FloorRTTSamples  = 2000
	// FloorBudget bounds each primitive's time per round, so that a slow
	// disk (10 ms per sync) does not stretch a run: at least one sample is
	// always taken.
	FloorBudget = time.Second
)

// The lock-cycle and handoff models, in commits and client round trips.
const (
	// CycleCommits and CycleRTTs: a lock cycle is an acquire and a
	// release, each one commit on the servers and one client round trip.
	CycleCommits = 2
	CycleRTTs    = 2
	// HandoffCommits and HandoffRTTs: from a holder's release to the next
	// waiter's grant and on to its release, the key is free for one commit
	// (the release, which grants the next waiter in the same write where the
	// backend can) plus one round trip (the release request in, the grant
	// out, each half of one). The contended workload's interval between
	// acquisitions and the handoff workload's latency are measured against
	// it.
	HandoffCommits = 1
	HandoffRTTs    = 1
	// GatewayCycleRTTs and GatewayHandoffRTTs are the loopback round trips
	// the gateway path adds: every request crosses one more hop (SDK →
	// gateway → backend). raftlock's nodes serve the gateway protocol
	// themselves, so its gateway path adds none.
	GatewayCycleRTTs   = 2
	GatewayHandoffRTTs = 1
)

// CommitModel is the floor of one commit of a backend: how many syncs and
// round trips between servers lie in series on its path.
type CommitModel struct {
	Syncs int `json:"syncs"`
	RTTs  int `json:"rtts"`
	// Why says which property of the backend gives that model.
	Why string `json:"why"`
}

// FloorModels is each backend's commit model. One floor does not fit all:
// a three-node hashicorp/raft cluster pays its leader's sync before it
// replicates, etcd's leader syncs in parallel with its followers, one
// PostgreSQL server replicates to nobody, and Redis as the bench runs it
// (appendonly no) syncs nothing.
var FloorModels = map[string]CommitModel{
	provision.Raft:       {Syncs: 2, RTTs: 1, Why: "hashicorp/raft: the leader appends and syncs its log (dispatchLogs) before it notifies the replicators; a follower then appends and syncs before it acknowledges"},
	provision.Etcd:       {Syncs: 1, RTTs: 1, Why: "etcd: the leader sends to its followers in parallel with writing its own WAL (raft thesis §10.2.1), so one follower's round trip and sync is the path"},
	provision.Postgres:   {Syncs: 1, RTTs: 0, Why: "PostgreSQL, one server, synchronous_commit on: one WAL flush per commit, no replication"},
	provision.Redlock:    {Syncs: 0, RTTs: 0, Why: "Redis with appendonly no: a write is acknowledged from memory; the masters are asked in parallel, so a cycle's floor is its client round trips"},
	provision.PGAdvisory: {Syncs: 0, RTTs: 0, Why: "pg_advisory_lock: PostgreSQL's in-memory lock manager, no WAL record and no commit, so a cycle's floor is its client round trips"},
	provision.ZooKeeper:  {Syncs: 1, RTTs: 1, Why: "ZooKeeper (Zab): the leader logs a proposal and sends it to the followers in parallel; each follower fsyncs its log before it acknowledges, so one follower's round trip and sync is the path"},
}

// floorModel is backend's commit model: its own, else that of the backend
// of ours it is a peer of (a peer library on the same servers pays the same
// commits: etcd-mutex etcd's, redsync and redislock Redis's).
func floorModel(backend string) CommitModel {
	info := provision.InfoOf(backend)
	if m, ok := FloorModels[info.Name]; ok {
		return m
	}
	return FloorModels[info.PeerOf]
}

// Floor is the physical floor measured in a run.
type Floor struct {
	// Dir is the directory the sync was measured in, and FS its
	// filesystem's type (tmpfs would make the sync free: the floor then
	// says nothing about a disk).
	Dir string `json:"dir"`
	FS  string `json:"fs,omitempty"`
	// Sync is a FloorBlock append + fdatasync, RTT a loopback round trip:
	// medians of the rounds' percentiles, in µs, and the samples taken.
	Sync FloorStat `json:"sync_us"`
	RTT  FloorStat `json:"rtt_us"`
	// Backends holds the floors derived for each measured backend, from
	// the p50s of Sync and RTT.
	Backends []BackendFloor `json:"backends"`

	rounds []floorRound
}

// FloorStat is one primitive's distribution, in µs.
type FloorStat struct {
	P50     float64 `json:"p50"`
	P99     float64 `json:"p99"`
	Samples int64   `json:"samples"`
}

type floorRound struct{ sync, rtt FloorStat }

// BackendFloor is one backend's floors, in µs.
type BackendFloor struct {
	Backend string      `json:"backend"`
	Model   CommitModel `json:"model"`
	// CommitUS = Syncs·sync + RTTs·rtt.
	CommitUS float64 `json:"commit_us"`
	// CycleUS = CycleCommits·commit + CycleRTTs·rtt: one acquire + release.
	CycleUS float64 `json:"cycle_us"`
	// HandoffUS = HandoffCommits·commit + HandoffRTTs·rtt.
	HandoffUS float64 `json:"handoff_us"`
}

// RunFloor is a run's figures as multiples of its backend's floor.
type RunFloor struct {
	// LatencyUS is the least one operation of the workload can take: the
	// cycle floor (sequential, parallel, contended — loose for contended,
	// whose cycle includes the wait behind the other clients) or the
	// handoff floor (handoff); plus the gateway's hop on that path.
	LatencyUS float64 `json:"latency_us"`
	// P50X is the run's p50 / LatencyUS.
	P50X float64 `json:"p50_x"`
	// OpsPerSec is the most operations per second the workload can reach
	// at the floor: 1/cycle (sequential), clients/cycle (parallel: by
	// Little's law, a closed loop of n clients whose cycles each take the
	// floor), 1/handoff (contended, handoff: one key, one holder at a time).
	OpsPerSec float64 `json:"ops_per_sec"`
	// OpsX is OpsPerSec / the run's ops/s: the time per operation as a
	// multiple of the floor's (for contended, the interval between
	// acquisitions over the handoff floor).
	OpsX float64 `json:"ops_x"`
}

// ErrFloor wraps every failure to measure the floor.
var ErrFloor = errors.New("bench: measuring the physical floor")

// newFloorHist records nanoseconds: loopback round trips are a few µs,
// below the resolution the runs' µs histograms need.
func newFloorHist() *hdrhistogram.Histogram {
	return hdrhistogram.New(1, int64(time.Minute), report.HistDigits)
}

func floorStat(h *hdrhistogram.Histogram) FloorStat {
	return FloorStat{
		P50:     float64(h.ValueAtQuantile(50)) / 1e3,
		P99:     float64(h.ValueAtQuantile(99)) / 1e3,
		Samples: h.TotalCount(),
	}
}

// MeasureSync appends n blocks of FloorBlock bytes to a new scratch file in
// dir, each followed by fdatasync, stopping early when budget has passed
// (after at least one), and returns each append + sync's duration. The
// file is removed before it returns.
func MeasureSync(ctx context.Context, dir string, n int, budget time.Duration) (*hdrhistogram.Histogram, error) {
	f, err := os.CreateTemp(dir, ".lockgate-floor-*")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFloor, err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	// Make the file's creation durable first: the samples are appends to
	// an existing file, not the first sync of a new one.
	if err := datasync(f); err != nil {
		return nil, fmt.Errorf("%w: sync %s: %w", ErrFloor, f.Name(), err)
	}
	block := make([]byte, FloorBlock)
	for i := range block {
		block[i] = byte(i)
	}
	h := newFloorHist()
	end := time.Now().Add(budget)
	for i := 0; i < n && (i == 0 || time.Now().Before(end)); i++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		t0 := time.Now()
		if _, err := f.Write(block); err != nil {
			return nil, fmt.Errorf("%w: append to %s: %w", ErrFloor, f.Name(), err)
		}
		if err := datasync(f); err != nil {
			return nil, fmt.Errorf("%w: fdatasync %s: %w", ErrFloor, f.Name(), err)
		}
		h.RecordValue(max(time.Since(t0).Nanoseconds(), 1))
	}
	return h, nil
}

// MeasureRTT starts an echo server on a free loopback port and makes n
// FloorMessage-byte round trips to it over one TCP connection (Go's
// default: Nagle off), stopping early when budget has passed (after at
// least one), and returns each round trip's duration.
func MeasureRTT(ctx context.Context, n int, budget time.Duration) (*hdrhistogram.Histogram, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFloor, err)
	}
	defer ln.Close()
	served := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			served <- err
			return
		}
		defer c.Close()
		_, err = io.Copy(c, c)
		served <- err
	}()
	var d net.Dialer
	c, err := d.DialContext(ctx, "tcp", ln.Addr().String())
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFloor, err)
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	msg := make([]byte, FloorMessage)
	back := make([]byte, FloorMessage)
	h := newFloorHist()
	end := time.Now().Add(budget)
	for i := 0; i < n && (i == 0 || time.Now().Before(end)); i++ {
		msg[0] = byte(i)
		t0 := time.Now()
		if _, err := c.Write(msg); err != nil {
			c.Close()
			return nil, errors.Join(fmt.Errorf("%w: loopback write: %w", ErrFloor, err), ctx.Err())
		}
		if _, err := io.ReadFull(c, back); err != nil {
			c.Close()
			return nil, errors.Join(fmt.Errorf("%w: loopback read: %w", ErrFloor, err), ctx.Err())
		}
		h.RecordValue(max(time.Since(t0).Nanoseconds(), 1))
		if back[0] != msg[0] {
			c.Close()
			return nil, fmt.Errorf("%w: the echo server returned another message", ErrFloor)
		}
	}
	c.Close()
	<-served // the server has seen EOF and closed its side
	return h, nil
}

// measureRound measures one round's sync and round trip into f.
func (f *Floor) measureRound(ctx context.Context) error {
	sh, err := MeasureSync(ctx, f.Dir, FloorSyncSamples, FloorBudget)
	if err != nil {
		return err
	}
	rh, err := MeasureRTT(ctx, FloorRTTSamples, FloorBudget)
	if err != nil {
		return err
	}
	f.rounds = append(f.rounds, floorRound{sync: floorStat(sh), rtt: floorStat(rh)})
	return nil
}

// summarise sets Sync and RTT to the medians of the rounds' percentiles
// (sample counts are totals) and derives each backend's floors.
func (f *Floor) summarise(backends []string) {
	stat := func(get func(floorRound) FloorStat) FloorStat {
		var s FloorStat
		p50 := make([]float64, len(f.rounds))
		p99 := make([]float64, len(f.rounds))
		for i, r := range f.rounds {
			p50[i], p99[i] = get(r).P50, get(r).P99
			s.Samples += get(r).Samples
		}
		s.P50, s.P99 = report.MedianOf(p50), report.MedianOf(p99)
		return s
	}
	f.Sync = stat(func(r floorRound) FloorStat { return r.sync })
	f.RTT = stat(func(r floorRound) FloorStat { return r.rtt })
	f.Backends = nil
	for _, b := range backends {
		f.Backends = append(f.Backends, DeriveFloor(b, f.Sync.P50, f.RTT.P50))
	}
}

// DeriveFloor is backend's floors given one sync and one round trip (µs).
func DeriveFloor(backend string, syncUS, rttUS float64) BackendFloor {
	m := floorModel(backend)
	commit := float64(m.Syncs)*syncUS + float64(m.RTTs)*rttUS
	return BackendFloor{
		Backend:   backend,
		Model:     m,
		CommitUS:  commit,
		CycleUS:   CycleCommits*commit + CycleRTTs*rttUS,
		HandoffUS: HandoffCommits*commit + HandoffRTTs*rttUS,
	}
}

// of returns the floors of backend, or false when none were derived.
func (f *Floor) of(backend string) (BackendFloor, bool) {
	if f == nil {
		return BackendFloor{}, false
	}
	i := slices.IndexFunc(f.Backends, func(b BackendFloor) bool { return b.Backend == backend })
	if i < 0 {
		return BackendFloor{}, false
	}
	return f.Backends[i], true
}

// RunFloor returns r's figures as multiples of its backend's floor (see
// RunFloor), or nil when the floor has no figures for it.
//
// Affinity's floor is parallel's (a cycle per client, without a cache: a
// cache-on run may beat it, which is what a cache is for). Wanted's latency
// floor is the signal's (SignalFloor), its ops/s floor a pair's two lock
// cycles (holder's, waiter's).
func (f *Floor) RunFloor(r *Run) *RunFloor {
	bf, ok := f.of(r.Backend)
	if !ok || r.Skipped || r.Workload == RW || r.Workload == Semaphore || r.Workload == MultiKey {
		// The primitives' workloads have no floor model: they are set
		// beside their mutex baselines instead (ModeComparison).
		return nil
	}
	cycle, handoff := bf.CycleUS, bf.HandoffUS
	if r.Via == provision.Gateway && provision.KindOf(r.Backend) != backends.KindRaft {
		cycle += GatewayCycleRTTs * f.RTT.P50
		handoff += GatewayHandoffRTTs * f.RTT.P50
	}
	rf := &RunFloor{LatencyUS: cycle}
	switch r.Workload {
	case Sequential:
		rf.OpsPerSec = 1e6 / cycle
	case Parallel, Affinity:
		rf.OpsPerSec = float64(r.Clients) * 1e6 / cycle
	case Wanted:
		rf.OpsPerSec = float64(r.Clients/2) * 1e6 / (2 * cycle)
		if sf := f.signalFloor(r); sf != nil {
			rf.LatencyUS = sf.FloorUS
		}
	case Contended:
		rf.OpsPerSec = 1e6 / handoff
	case Handoff:
		rf.LatencyUS = handoff
		rf.OpsPerSec = 1e6 / handoff
	}
	rf.P50X = ratio(r.LatencyUS.P50, rf.LatencyUS)
	rf.OpsX = ratio(rf.OpsPerSec, r.OpsPerSec)
	return rf
}

// ratio is a/b, or 0 when it is not a finite number (a floor of 0 µs:
// loopback on a clock too coarse to see it).
func ratio(a, b float64) float64 {
	q := a / b
	if math.IsNaN(q) || math.IsInf(q, 0) {
		return 0
	}
	return q
}
