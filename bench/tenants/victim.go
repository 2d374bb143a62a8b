package tenants

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
)

// tenantsVictim is the victim's workload of one phase.
type tenantsVictim struct {
	r       *tenantsRun
	clients []*client.Client
	seq     []*client.Client
	hot     []*client.Client
	watcher *client.Client

	mu        sync.Mutex
	res       TenantsVictim
	seqHist   *hdrhistogram.Histogram
	hotHist   *hdrhistogram.Histogram
	sessions  map[*lock.Session]bool
	lastEvent time.Time
	trackers  sync.WaitGroup
}

func newTenantsVictim(r *tenantsRun) *tenantsVictim {
	return &tenantsVictim{r: r, seqHist: report.NewHist(), hotHist: report.NewHist(), sessions: map[*lock.Session]bool{},
		res: TenantsVictim{Failures: map[string]int{}}}
}

func (v *tenantsVictim) newClient(id string) (*client.Client, error) {
	c, err := client.New(v.r.c.APIAddrs, client.Options{Token: v.r.files.VictimToken, ClientID: id})
	if err != nil {
		return nil, err
	}
	v.clients = append(v.clients, c)
	return c, nil
}

func seqKey(i int) string { return fmt.Sprintf("%sseq-%d", victimPrefix, i) }

const hotKey = victimPrefix + "hot"

// warmUp opens the victim's clients and makes one cycle on each (its
// connection and its session), unmeasured; pctx is the phase's, which
// the sessions are tracked until.
func (v *tenantsVictim) warmUp(ctx, pctx context.Context) error {
	for i := range v.r.cfg.SeqWorkers {
		c, err := v.newClient(fmt.Sprintf("victim-seq-%d", i))
		if err != nil {
			return err
		}
		v.seq = append(v.seq, c)
	}
	for i := range v.r.cfg.HotWorkers {
		c, err := v.newClient(fmt.Sprintf("victim-hot-%d", i))
		if err != nil {
			return err
		}
		v.hot = append(v.hot, c)
	}
	c, err := v.newClient("victim-watch")
	if err != nil {
		return err
	}
	v.watcher = c
	errs := make(chan error, len(v.seq)+len(v.hot))
	warm := func(c *client.Client, key string) {
		wctx, cancel := context.WithTimeout(ctx, tenantsWarmupTimeout)
		defer cancel()
		lease, err := c.Acquire(wctx, key, lock.AcquireOptions{})
		if err == nil {
			v.track(pctx, lease.Session())
			err = c.Release(wctx, lease)
		}
		if err != nil {
			err = fmt.Errorf("the victim's first acquire and release of %s (unmeasured): %w", key, err)
		}
		errs <- err
	}
	for i, c := range v.seq {
		go warm(c, seqKey(i))
	}
	for _, c := range v.hot {
		go warm(c, hotKey)
	}
	var all []error
	for range len(v.seq) + len(v.hot) {
		all = append(all, <-errs)
	}
	return errors.Join(all...)
}

// run runs the workload until pctx ends; each worker finishes its cycle
// (bounded by ctx) and returns.
func (v *tenantsVictim) run(ctx, pctx context.Context) {
	var wg sync.WaitGroup
	for i, c := range v.seq {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.worker(ctx, pctx, c, seqKey(i), false)
		}()
	}
	for _, c := range v.hot {
		wg.Add(1)
		go func() {
			defer wg.Done()
			v.worker(ctx, pctx, c, hotKey, true)
		}()
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		v.watch(pctx)
	}()
	wg.Wait()
	v.trackers.Wait()
}

// tenantsCounts are a worker's tallies, added to the phase's at its end.
type tenantsCounts struct {
	attempts, granted, releases, releaseFailures, leasesLost int
	failures                                                 map[string]int
}

func (v *tenantsVictim) worker(ctx, pctx context.Context, c *client.Client, key string, contended bool) {
	h := report.NewHist()
	n := tenantsCounts{failures: map[string]int{}}
	for pctx.Err() == nil && ctx.Err() == nil {
		v.cycle(ctx, pctx, c, key, contended, h, &n)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if contended {
		v.hotHist.Merge(h)
	} else {
		v.seqHist.Merge(h)
	}
	v.res.Attempts += n.attempts
	v.res.Granted += n.granted
	v.res.Releases += n.releases
	v.res.ReleaseFailures += n.releaseFailures
	v.res.LeasesLost += n.leasesLost
	for k, x := range n.failures {
		v.res.Failures[k] += x
	}
}

// cycle is one acquire (timed), hold and release.
func (v *tenantsVictim) cycle(ctx, pctx context.Context, c *client.Client, key string, contended bool, h *hdrhistogram.Histogram, n *tenantsCounts) {
	actx, cancel := context.WithTimeout(ctx, tenantsOpTimeout)
	defer cancel()
	t0 := time.Now()
	lease, err := c.Acquire(actx, key, lock.AcquireOptions{})
	d := time.Since(t0)
	if ctx.Err() != nil {
		return // the run was interrupted: not the victim's failure
	}
	n.attempts++
	if err != nil {
		n.failures["acquire: "+tenantsErrKind(err)]++
		provision.SleepCtx(pctx, tenantsErrorPause)
		return
	}
	n.granted++
	h.RecordValue(min(max(d.Microseconds(), report.HistMin), report.HistMax))
	v.track(pctx, lease.Session())
	if contended && v.r.cfg.Hold > 0 {
		time.Sleep(v.r.cfg.Hold)
	}
	lost := lease.Err() != nil
	err = c.Release(actx, lease)
	switch {
	case err == nil && !lost:
		n.releases++
	case lost || errors.Is(err, lock.ErrNotHeld):
		n.leasesLost++
		cause := err
		if lost {
			cause = lease.Err()
		}
		n.failures["lease lost: "+tenantsErrKind(cause)]++
	default:
		n.releaseFailures++
		n.failures["release: "+tenantsErrKind(err)]++
	}
}

// track follows a session of the victim's until the phase ends: one that
// ends before is lost (the SDK's keep-alive was refused, or it ran out).
func (v *tenantsVictim) track(pctx context.Context, s *lock.Session) {
	if s == nil {
		return
	}
	v.mu.Lock()
	if v.sessions[s] {
		v.mu.Unlock()
		return
	}
	v.sessions[s] = true
	v.res.Sessions++
	v.mu.Unlock()
	v.trackers.Add(1)
	go func() {
		defer v.trackers.Done()
		select {
		case <-s.Done():
			if pctx.Err() == nil {
				v.mu.Lock()
				v.res.SessionsLost++
				v.res.Failures["session lost: "+tenantsErrKind(s.Err())]++
				v.mu.Unlock()
			}
		case <-pctx.Done():
		}
	}()
}

// watch keeps a prefix watch on the victim's keys until pctx ends,
// counting its events; a watch that breaks is counted and opened again.
func (v *tenantsVictim) watch(pctx context.Context) {
	for pctx.Err() == nil {
		ch, err := v.watcher.WatchPrefix(pctx, victimPrefix)
		if err != nil {
			if pctx.Err() != nil {
				return
			}
			v.mu.Lock()
			v.res.WatchOpenFailures++
			v.res.Failures["watch: "+tenantsErrKind(err)]++
			v.mu.Unlock()
			provision.SleepCtx(pctx, tenantsErrorPause)
			continue
		}
		broke := false
		for ev := range ch {
			now := time.Now()
			v.mu.Lock()
			switch ev.Type {
			case lock.EventSynced:
				v.lastEvent = now
			case lock.EventGranted, lock.EventReleased, lock.EventExpired:
				v.res.WatchEvents++
				if ev.Type == lock.EventExpired {
					v.res.WatchExpired++
				}
				if !v.lastEvent.IsZero() {
					v.res.WatchMaxGapMS = max(v.res.WatchMaxGapMS, report.Millis(now.Sub(v.lastEvent)))
				}
				v.lastEvent = now
			case lock.EventError:
				if pctx.Err() == nil {
					broke = true
					v.res.Failures["watch broke: "+tenantsErrKind(ev.Err)]++
				}
			}
			v.mu.Unlock()
		}
		if pctx.Err() == nil {
			if !broke {
				v.mu.Lock()
				v.res.Failures["watch broke: closed"]++
				v.mu.Unlock()
			}
			v.mu.Lock()
			v.res.WatchBreaks++
			v.lastEvent = time.Time{}
			v.mu.Unlock()
		}
	}
}

// result is the phase's victim figures.
func (v *tenantsVictim) result() TenantsVictim {
	v.mu.Lock()
	defer v.mu.Unlock()
	res := v.res
	res.Failures = maps.Clone(v.res.Failures)
	if res.Attempts > 0 {
		res.SuccessRate = float64(res.Granted) / float64(res.Attempts)
	}
	res.Sequential, res.Contended = tenantsLatencyOf(v.seqHist), tenantsLatencyOf(v.hotHist)
	res.SessionsKept = res.Sessions - res.SessionsLost
	return res
}

// close closes the sessions the phase opened (their leases are released
// already) and the clients.
func (v *tenantsVictim) close() {
	v.mu.Lock()
	sessions := slices.Collect(maps.Keys(v.sessions))
	v.mu.Unlock()
	if len(v.clients) > 0 {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		for _, s := range sessions {
			if s.Err() == nil {
				v.clients[0].CloseSession(ctx, s)
			}
		}
		cancel()
	}
	for _, c := range v.clients {
		c.Close()
	}
}

// tenantsLatencyOf summarises an acquire-latency histogram (µs).
func tenantsLatencyOf(h *hdrhistogram.Histogram) TenantsLatency {
	if h == nil || h.TotalCount() == 0 {
		return TenantsLatency{}
	}
	p := report.PercentilesOf(h)
	return TenantsLatency{Count: h.TotalCount(), P50US: p.P50, P99US: p.P99, MaxUS: p.Max}
}
