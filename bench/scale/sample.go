package scale

import (
	"context"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
)

// sampleEvery scrapes every server's /metrics each interval into
// r.samples until ctx ends; the returned channel closes then.
func (r *scaleRun) sampleEvery(ctx context.Context, every time.Duration) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			r.scrapeLeader(ctx, true)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return done
}

// leaderSample scrapes every server and returns the leader's scrape (nil
// when no server answered as the leader).
func (r *scaleRun) leaderSample(ctx context.Context) *promSample { return r.scrapeLeader(ctx, false) }

// scrapeLeader scrapes every server and returns the leader's scrape; a
// periodic one is recorded as a ScaleSample, its rates taken from the
// leader's previous periodic sample.
func (r *scaleRun) scrapeLeader(ctx context.Context, periodic bool) *promSample {
	addrs, names := r.t.metricsAddrs()
	mn := r.t.metricNames()
	scr := make([]*promSample, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			defer cancel()
			scr[i], _ = scrape(sctx, a)
		}()
	}
	wg.Wait()
	var lead *promSample
	leader := ""
	for i, s := range scr {
		if s != nil && mn.leader(s) {
			lead, leader = s, names[i]
		}
	}
	if lead != nil {
		r.leaderAddr.Store(&leader)
	}
	if lead == nil || !periodic {
		return lead
	}
	r.smu.Lock()
	defer r.smu.Unlock()
	p := r.phase.Load()
	smp := ScaleSample{T: time.Since(r.start).Seconds(), Leader: leader, HeapInuse: lead.value(mHeapInuse),
		HeapAlloc: lead.value(mHeapAlloc), HeapLive: liveHeap(lead), Locks: -1, Sessions: -1, RenewPerSec: -1, EntriesPerSec: -1,
		BytesPerLease: -1, RenewTotal: -1, EntriesTotal: -1}
	if p != nil {
		smp.Phase = p.name
	}
	if v, ok := lead.get(mn.locks); ok {
		smp.Locks = v
	}
	if v, ok := lead.get(mn.sessions); ok {
		smp.Sessions = v
	}
	if v, ok := mn.renewals(lead); ok {
		smp.RenewTotal = v
	}
	if v, ok := lead.get(mn.entries); ok {
		smp.EntriesTotal = v
	}
	if prev := r.last[leader]; prev != nil && r.leader == leader {
		dt := lead.at.Sub(prev.at).Seconds()
		if a, ok := mn.renewals(lead); ok {
			if b, ok := mn.renewals(prev); ok && dt > 0 {
				smp.RenewPerSec = (a - b) / dt
			}
		}
		if a, ok := lead.get(mn.entries); ok && dt > 0 {
			smp.EntriesPerSec = (a - prev.value(mn.entries)) / dt
		}
	}
	switch smp.Phase {
	case PhaseWaiters, PhaseLoad, PhaseFaults:
		if r.rep.HeapIdleBytes > 0 && smp.HeapLive > 0 {
			smp.BytesPerLease = (smp.HeapLive - r.rep.HeapIdleBytes) / float64(r.cfg.Leases)
		}
	}
	r.last[leader] = lead
	r.leader = leader
	r.samples = append(r.samples, smp)
	return lead
}

// liveHeap estimates the heap live after the last collection from the
// goal the collector set then: go_memstats_next_gc_bytes is the live heap
// times 1 + GOGC/100, GOGC being 100 (the nodes do not change it); 0 when
// absent.
func liveHeap(s *promSample) float64 { return s.value(mNextGC) / 2 }

// heapLive is the leader's live heap (liveHeap) once it has collected
// twice from now, so that the estimate is of the heap as it is now; it
// waits up to 30 s for the collections.
func (r *scaleRun) heapLive(ctx context.Context) float64 {
	s := r.leaderSample(ctx)
	if s == nil {
		return 0
	}
	// A node that offers it collects on request (POST /v1/debug/gc): its
	// live heap then, exactly.
	if addr := r.leaderAddr.Load(); addr != nil && r.cfg.Backend == provision.Raft {
		if v, err := postGC(ctx, *addr); err == nil {
			return v
		}
	}
	if _, ok := s.get(mNextGC); !ok {
		return 0
	}
	gcs, ok := s.get(mGCCount)
	deadline := time.Now().Add(30 * time.Second)
	for ok && time.Now().Before(deadline) {
		if !provision.SleepCtx(ctx, 100*time.Millisecond) {
			break
		}
		n := r.leaderSample(ctx)
		if n == nil {
			continue
		}
		s = n
		if s.value(mGCCount) >= gcs+2 {
			return liveHeap(s)
		}
	}
	// No two collections in time: the heap allocated now (live and
	// garbage) bounds the live heap from above.
	r.note("the leader collected less than twice in 30 s: a heap figure is its allocated heap, live and garbage (an upper bound)")
	return max(liveHeap(s), s.value(mHeapAlloc))
}

// phaseRate is the rate of a counter over a phase: its growth from the
// phase's first periodic sample to its last of the same leader, per
// second.
func phaseRate(samples []ScaleSample, phase string, counter func(ScaleSample) float64) (float64, bool) {
	var first, last *ScaleSample
	for i := range samples {
		s := &samples[i]
		if s.Phase != phase || counter(*s) < 0 {
			continue
		}
		if first == nil {
			first = s
		} else if s.Leader == first.Leader {
			last = s
		}
	}
	if first == nil || last == nil || last.T <= first.T {
		return 0, false
	}
	return (counter(*last) - counter(*first)) / (last.T - first.T), true
}
