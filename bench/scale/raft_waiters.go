package scale

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// waiters queues cfg.Waiters connections on held keys of their own and
// as many on one key, one at a time each once the leader counts the one
// before it, then releases the one key and checks its grants come in
// arrival order; then every waiter leaves.
func (t *raftScale) waiters(ctx context.Context, r *scaleRun) error {
	cfg := t.cfg
	// Every waiting connection is a descriptor in the bench and in the
	// leader: the own-key waiters have one each; the one-key waiters
	// share what is left of the open-files limit (beyond a reserve for
	// the holders, the background clients, Raft and files) when it
	// cannot give them one each — each is still its own waiter in the
	// key's FIFO queue, at most gateway.DefaultMaxWaitersPerConn per
	// connection.
	qconns := cfg.Waiters
	if r.fds > 0 {
		const reserve = 1500
		budget := int(r.fds) - reserve - cfg.Waiters - len(t.holders)
		if budget < qconns {
			qconns = max(budget, (cfg.Waiters+1023)/1024, 1)
			r.note("the open-files limit is %d per process (the hard limit here; raising it needs CAP_SYS_RESOURCE): "+
				"the %d one-key waiters share %d connections, %d own-key waiters have one each", r.fds, cfg.Waiters, qconns, cfg.Waiters)
		}
	}
	w := &ScaleWaiters{Connections: cfg.Waiters + qconns, FirstOutOfOrder: -1}
	r.rep.WaitersR = w
	w.HeapBeforeBytes = r.heapLive(ctx)
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var clients []*client.Client
	leave := func() {
		closeAll(clients)
		clients = nil
	}
	defer leave()
	newClient := func(name string) (*client.Client, error) {
		c, err := client.New(t.addrs, client.Options{ClientID: name})
		if err == nil {
			clients = append(clients, c)
		}
		return c, err
	}
	t0 := time.Now()
	var unexpected atomic.Int64
	var waitErrs atomic.Int64
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	// Own keys, in chunks, each chunk counted queued by the leader.
	base := r.leaderValue(ctx, mWaitersMetric)
	const chunk = 500
	for from := 0; from < cfg.Waiters; from += chunk {
		to := min(from+chunk, cfg.Waiters)
		for i := from; i < to; i++ {
			c, err := newClient(fmt.Sprintf("scale-w-%d", i))
			if err != nil {
				return err
			}
			key := t.keys[i]
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := c.Acquire(wctx, key, lock.AcquireOptions{TTL: 30 * time.Second})
				switch {
				case err == nil:
					unexpected.Add(1)
					c.Release(context.WithoutCancel(wctx), l)
				case wctx.Err() == nil:
					waitErrs.Add(1)
				}
			}()
		}
		if err := r.awaitLeader(ctx, mWaitersMetric, base+float64(to), 60*time.Second); err != nil {
			r.note("own-key waiters: %v", err)
			break
		}
	}
	r.progress("%d waiters queued on keys of their own", cfg.Waiters)
	// One key, held by its own client; waiters one at a time.
	fifoKey := r.prefix + "/fifo"
	holder, err := newClient("scale-fifo-holder")
	if err != nil {
		return err
	}
	hl, err := holder.Acquire(ctx, fifoKey, lock.AcquireOptions{TTL: 60 * time.Second, AutoRenew: true})
	if err != nil {
		return fmt.Errorf("scale: holding the FIFO key: %w", err)
	}
	var omu sync.Mutex
	var order []int
	granted := make(chan struct{}, cfg.Waiters)
	qcs := make([]*client.Client, 0, qconns)
	for j := range cfg.Waiters {
		if j < qconns {
			c, err := newClient(fmt.Sprintf("scale-q-%d", j))
			if err != nil {
				return err
			}
			qcs = append(qcs, c)
		}
		c := qcs[j%qconns]
		wg.Add(1)
		go func() {
			defer wg.Done()
			l, err := c.Acquire(wctx, fifoKey, lock.AcquireOptions{TTL: 30 * time.Second})
			if err != nil {
				if wctx.Err() == nil {
					waitErrs.Add(1)
				}
				return
			}
			omu.Lock()
			order = append(order, j)
			omu.Unlock()
			rctx, rcancel := context.WithTimeout(context.WithoutCancel(wctx), 10*time.Second)
			c.Release(rctx, l)
			rcancel()
			granted <- struct{}{}
		}()
		// Arrival order: the next is sent once the leader counts this one.
		deadline := time.Now().Add(30 * time.Second)
		for {
			info, err := holder.Inspect(ctx, fifoKey)
			if err == nil && info.Waiters >= j+1 {
				break
			}
			if ctx.Err() != nil {
				return ctx.Err()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("scale: FIFO waiter %d not counted queued within 30 s (last inspect: %v, %+v)", j, err, info)
			}
		}
	}
	w.QueueSeconds = time.Since(t0).Seconds()
	w.HeapAfterBytes = r.heapLive(ctx)
	t1 := time.Now()
	if err := holder.Release(ctx, hl); err != nil {
		return fmt.Errorf("scale: releasing the FIFO key: %w", err)
	}
	for range cfg.Waiters {
		select {
		case <-granted:
		case <-time.After(30 * time.Second):
			r.note("FIFO release stalled: no grant within 30 s")
			goto judged
		case <-ctx.Done():
			return ctx.Err()
		}
	}
judged:
	w.ReleaseSeconds = time.Since(t1).Seconds()
	omu.Lock()
	w.Granted = len(order)
	w.InOrder, w.FirstOutOfOrder = fifoJudge(order)
	omu.Unlock()
	cancel()
	wg.Wait()
	leave()
	// The connections' cost: the heap with them queued over the heap once
	// they left (closer in time, so less of other growth, than the heap
	// before they came, which is reported beside it).
	w.HeapLeftBytes = r.heapLive(ctx)
	if w.HeapLeftBytes > 0 && w.HeapAfterBytes > 0 {
		w.BytesPerConn = (w.HeapAfterBytes - w.HeapLeftBytes) / float64(w.Connections)
	}
	r.progress("%d + %d waiting connections: %.0f B each on the leader", cfg.Waiters, cfg.Waiters, w.BytesPerConn)
	w.Unexpected = int(unexpected.Load())
	if n := waitErrs.Load(); n > 0 {
		r.note("%d waits failed before they were cancelled", n)
	}
	r.progress("FIFO: %d granted, in order %v, in %.1f s", w.Granted, w.InOrder, w.ReleaseSeconds)
	return nil
}

const mWaitersMetric = "lockgate_raftlock_waiters"

// fifoJudge reports whether the waiters were granted in arrival order —
// order lists their arrival numbers in the order of their grants — and
// else the position of the first grant out of it (-1 when in order).
func fifoJudge(order []int) (bool, int) {
	for i, j := range order {
		if i != j {
			return false, i
		}
	}
	return true, -1
}

// leaderValue is metric name on the leader now (0 when absent).
func (r *scaleRun) leaderValue(ctx context.Context, name string) float64 {
	return r.leaderSample(ctx).value(name)
}

// awaitLeader polls the leader's metric name until it reaches at least v.
func (r *scaleRun) awaitLeader(ctx context.Context, name string, v float64, within time.Duration) error {
	deadline := time.Now().Add(within)
	for {
		s := r.leaderSample(ctx)
		got, ok := s.get(name)
		if ok && got >= v {
			return nil
		}
		if s != nil && !ok {
			return fmt.Errorf("the leader serves no %s", name)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s is %v after %v, want %v", name, got, within, v)
		}
		if !provision.SleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}
