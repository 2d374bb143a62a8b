package latency

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/lock"
)

// recorder collects one round of one workload.
type recorder struct {
	mu    sync.Mutex
	hist  *hdrhistogram.Histogram
	ops   atomic.Int64
	kinds map[string]int64
	// reached, once endRound sets it past the round's length, is closed
	// when ops reaches want.
	want    int64
	reached chan struct{}
}

func (rc *recorder) latency(d time.Duration) {
	us := max(d.Microseconds(), report.HistMin)
	rc.mu.Lock()
	rc.hist.RecordValue(min(us, report.HistMax))
	rc.mu.Unlock()
}

func (rc *recorder) fail(err error) {
	rc.mu.Lock()
	rc.kinds[provision.ErrorKind(err)]++
	rc.mu.Unlock()
}

var runSeq atomic.Int64

// runWorkload runs workload w on conn for d and, when r is not nil, records
// into it (its CDF histogram and error counts) and returns the round.
func runWorkload(ctx context.Context, conn *provision.Conn, w string, cfg LatencyConfig, d time.Duration, r *Run) (roundResult, error) {
	switch w {
	case Wanted:
		return runWanted(ctx, conn, cfg, d, r)
	case MultiKey:
		return runMultiKey(ctx, conn, cfg, d, r)
	case RW, Semaphore:
		if err := provision.NeedFeature(ctx, conn, modeFeature(w)); err != nil {
			return roundResult{}, err
		}
	}
	rc := &recorder{hist: report.NewHist(), kinds: map[string]int64{}}
	clients := conn.Clients[:clientsOf(w, len(conn.Clients))]
	prefix := fmt.Sprintf("bench/%s/%d/%d", w, time.Now().UnixNano(), runSeq.Add(1))
	opts := lock.AcquireOptions{TTL: cfg.TTL}

	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	go endRound(runCtx, cancel, d, cfg.MinOps, cfg.MinOpsWait, rc)
	// lastRelease is when the last holder of the contended key began its
	// release, in ns since start (handoff).
	var lastRelease atomic.Int64
	lastRelease.Store(-1)

	var shared []string
	if w == Affinity {
		for k := range cfg.Affinity.SharedKeys {
			shared = append(shared, fmt.Sprintf("%s/shared/%d", prefix, k))
		}
	}

	// unsupported is the first error matching lock.ErrUnsupported: the
	// round ends with it.
	var unsupported atomic.Pointer[error]
	optsFor := cfg.Modes.opts(w, opts)

	var wg sync.WaitGroup
	for i, l := range clients {
		key := prefix
		if w == Parallel {
			key = fmt.Sprintf("%s/%d", prefix, i)
		}
		pick := func() string { return key }
		if w == Affinity {
			pick = cfg.Affinity.picker(prefix, i, shared)
		}
		var interval time.Duration
		if cfg.Rate > 0 {
			interval = time.Duration(float64(time.Second) * float64(len(clients)) / cfg.Rate)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			// Open loop: client i's k-th operation is due at start +
			// offset + k·interval; the offset spreads the clients.
			next := start
			if interval > 0 {
				next = start.Add(time.Duration(rand.Int64N(int64(interval))))
			}
			for runCtx.Err() == nil {
				opStart := time.Now()
				if interval > 0 {
					if wait := time.Until(next); wait > 0 {
						select {
						case <-time.After(wait):
						case <-runCtx.Done():
							return
						}
					}
					opStart = next // latency counts from the schedule
					next = next.Add(interval)
				}
				acqStart := time.Since(start)
				lease, err := l.Acquire(runCtx, pick(), optsFor())
				if err != nil {
					if errors.Is(err, lock.ErrUnsupported) {
						unsupported.CompareAndSwap(nil, &err)
						cancel()
						return
					}
					if runCtx.Err() != nil {
						return // the round ended while waiting
					}
					rc.fail(err)
					continue
				}
				granted := time.Since(start)
				if w == Handoff {
					if rel := lastRelease.Load(); rel >= 0 && int64(acqStart) < rel {
						rc.latency(granted - time.Duration(rel))
						rc.count()
					}
				}
				if w == Handoff {
					lastRelease.Store(int64(time.Since(start)))
				}
				// The release is not bounded by the round: a lock left
				// held would stall the next round's clients.
				relCtx, relCancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
				err = l.Release(relCtx, lease)
				relCancel()
				if err != nil {
					rc.fail(err)
					continue
				}
				if w != Handoff {
					rc.latency(time.Since(opStart))
					rc.count()
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	if err := roundErr(ctx, &unsupported); err != nil {
		return roundResult{}, err
	}
	return rc.finish(elapsed, r), nil
}

// endRound ends a round (cancel) once d has passed and rc has counted at
// least minOps operations, or once d+wait has passed; it returns when ctx
// ends otherwise.
func endRound(ctx context.Context, cancel context.CancelFunc, d time.Duration, minOps int64, wait time.Duration, rc *recorder) {
	defer cancel()
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-timer.C:
	case <-ctx.Done():
		return
	}
	if minOps <= 0 || rc.ops.Load() >= minOps {
		return
	}
	// Past d, the round ends at the operation that makes minOps, which
	// rc.counted signals, or at the wait's end.
	rc.mu.Lock()
	rc.want, rc.reached = minOps, make(chan struct{})
	reached := rc.reached
	if rc.ops.Load() >= minOps {
		close(reached)
		rc.reached = nil
	}
	rc.mu.Unlock()
	timer.Reset(wait)
	select {
	case <-reached:
	case <-timer.C:
	case <-ctx.Done():
	}
}

// count records one completed operation.
func (rc *recorder) count() {
	n := rc.ops.Add(1)
	rc.mu.Lock()
	if rc.reached != nil && n >= rc.want {
		close(rc.reached)
		rc.reached = nil
	}
	rc.mu.Unlock()
}

// finish is the round rc recorded over elapsed; when r is not nil, its
// latencies and errors are added to r's.
func (rc *recorder) finish(elapsed time.Duration, r *Run) roundResult {
	rr := roundResult{ops: rc.ops.Load(), elapsed: elapsed, pct: report.PercentilesOf(rc.hist)}
	if r != nil {
		r.hist.Merge(rc.hist)
		for k, n := range rc.kinds {
			if r.ErrorKinds == nil {
				r.ErrorKinds = map[string]int64{}
			}
			r.ErrorKinds[k] += n
			r.Errors += n
		}
	}
	return rr
}

// roundErr is why a round that has ended yields no result, if it does not:
// ctx ended, or a client met lock.ErrUnsupported (the first such error,
// held in unsupported), which ended the round.
func roundErr(ctx context.Context, unsupported *atomic.Pointer[error]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := unsupported.Load(); err != nil {
		return *err
	}
	return nil
}
