package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
)

func (t *raftScale) leaderNode() *servers.RaftNode {
	if t.procs == nil {
		return nil
	}
	return t.procs.Leader()
}

func (t *raftScale) snapshot(ctx context.Context, r *scaleRun) error {
	ld := t.leaderNode()
	addr := ""
	if ld != nil {
		addr = ld.APIAddr
	} else if r.leader != "" {
		addr = r.leader
	}
	if addr == "" {
		return errors.New("snapshot: no leader known")
	}
	d, err := postSnapshot(ctx, addr)
	if err != nil {
		return err
	}
	s := &ScaleSnapshot{RequestMs: report.Millis(d), ServerSeconds: -1}
	if sm, err := scrape(ctx, addr); err == nil {
		if v, ok := sm.get(mSnapshotSecs); ok {
			s.ServerSeconds = v
		}
	}
	r.rep.Snapshot = s
	r.progress("snapshot: %.0f ms", s.RequestMs)
	return nil
}

// postSnapshot asks the node at addr for a snapshot now (POST
// /v1/cluster/snapshot) and returns how long the request took.
func postSnapshot(ctx context.Context, addr string) (time.Duration, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/cluster/snapshot", nil)
	if err != nil {
		return 0, err
	}
	t0 := time.Now()
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("snapshot of %s: %w", addr, err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("snapshot of %s: POST /v1/cluster/snapshot answered %s", addr, resp.Status)
	}
	return time.Since(t0), nil
}

// postGC asks the node at addr to collect its garbage now (POST
// /v1/debug/gc) and returns its live heap then.
func postGC(ctx context.Context, addr string) (float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+addr+"/v1/debug/gc", nil)
	if err != nil {
		return 0, err
	}
	resp, err := (&http.Client{Timeout: time.Minute}).Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return 0, fmt.Errorf("POST /v1/debug/gc on %s answered %s", addr, resp.Status)
	}
	var g struct {
		HeapAllocBytes float64 `json:"heap_alloc_bytes"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&g); err != nil {
		return 0, err
	}
	return g.HeapAllocBytes, nil
}

func (t *raftScale) restartFollower(ctx context.Context, r *scaleRun) error {
	if t.procs == nil {
		return errors.New("follower restart: not measured with --servers (the bench restarts only nodes it started)")
	}
	ld := t.procs.Leader()
	var f *servers.RaftNode
	for _, nd := range t.procs.Nodes {
		if nd != ld && nd.PID() != 0 {
			f = nd
			break
		}
	}
	if ld == nil || f == nil {
		return errors.New("follower restart: no leader and follower found")
	}
	// The follower snapshots the whole table first, so that its restart
	// restores it from the snapshot (what a node restarted in production
	// does), rather than replaying the log since its last snapshot.
	if _, err := postSnapshot(ctx, f.APIAddr); err != nil {
		r.progress("follower restart: %v (restarting without a fresh snapshot)", err)
	}
	f.Stop()
	target := float64(0)
	if s, err := scrape(ctx, ld.APIAddr); err == nil {
		target = s.value(mCommitIndex)
	}
	t0 := time.Now()
	if err := f.Restart(); err != nil {
		return fmt.Errorf("follower restart: %w", err)
	}
	rs := &ScaleRestore{Node: f.APIAddr, ServeMs: report.Millis(time.Since(t0)), ServerSeconds: -1}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		s, err := scrape(ctx, f.APIAddr)
		if err == nil && s.value(mAppliedIndex) >= target {
			rs.CaughtUpMs = report.Millis(time.Since(t0))
			if v, ok := s.get(mRestoreSecs); ok {
				rs.ServerSeconds = v
			}
			break
		}
		if !provision.SleepCtx(ctx, 20*time.Millisecond) {
			return ctx.Err()
		}
	}
	r.rep.Restore = rs
	r.progress("follower %s restarted: serves in %.0f ms, caught up in %.0f ms", f.APIAddr, rs.ServeMs, rs.CaughtUpMs)
	return nil
}

func (t *raftScale) killLeader(ctx context.Context, r *scaleRun) error {
	if t.procs == nil {
		return errors.New("failover: not measured with --servers (the bench kills only nodes it started)")
	}
	ld := t.procs.Leader()
	if ld == nil {
		return errors.New("failover: no leader found")
	}
	// The prober is connected (to the leader) before the kill.
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	if l, err := t.prober.Acquire(pctx, r.prefix+"/probe/warm", lock.AcquireOptions{TTL: 5 * time.Second}); err == nil {
		t.prober.Release(pctx, l)
	}
	cancel()
	f := &ScaleFailover{Killed: ld.APIAddr}
	r.rep.Failover = f
	ld.Kill()
	if err := firstGrant(ctx, r, t.prober, f); err != nil {
		return err
	}
	if f.Granted {
		f.NewLeader = t.prober.Endpoint()
	}
	r.progress("leader %s killed: first grant after %.0f ms on %s", f.Killed, f.GrantMs, f.NewLeader)
	if err := ld.Restart(); err != nil {
		return fmt.Errorf("failover: restarting the killed leader: %w", err)
	}
	return nil
}

// firstGrant times, from now (just after the leader was killed), the
// first grant of a new key to prober: f.GrantMs, within 60 s.
func firstGrant(ctx context.Context, r *scaleRun, prober lock.Locker, f *ScaleFailover) error {
	t0 := time.Now()
	for i := 0; time.Since(t0) < 60*time.Second; i++ {
		actx, cancel := context.WithTimeout(ctx, 2*time.Second)
		l, err := prober.Acquire(actx, fmt.Sprintf("%s/probe/%d", r.prefix, i), lock.AcquireOptions{TTL: 5 * time.Second})
		cancel()
		if err == nil {
			f.GrantMs, f.Granted = report.Millis(time.Since(t0)), true
			rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			prober.Release(rctx, l)
			cancel()
			return nil
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return nil
}

func (t *raftScale) lost(ctx context.Context, r *scaleRun) (int, int, error) {
	leases, sessions := 0, 0
	for _, g := range t.leases {
		for _, l := range g {
			select {
			case <-l.Done():
				leases++
			default:
			}
		}
	}
	for _, s := range t.sessions {
		if s != nil && s.Err() != nil {
			sessions++
		}
	}
	held := 0
	for _, g := range t.leases {
		held += len(g)
	}
	leases += t.cfg.Leases - held // never acquired: not held either
	if s := r.leaderSample(ctx); s != nil {
		if v, ok := s.get(mLocks); ok && v < float64(t.cfg.Leases) {
			r.note("the leader holds %.0f locks, fewer than the %d leases", v, t.cfg.Leases)
			leases = max(leases, t.cfg.Leases-int(v))
		}
	}
	return leases, sessions, nil
}

func (t *raftScale) stopKeepAlive(ctx context.Context, r *scaleRun) (time.Time, error) {
	if t.keeper != nil {
		t.keeper.stop()
		t.keeper.burst(ctx)
		r.rep.KeepAlivesSent = t.keeper.sent.Load()
		return time.Now(), nil
	}
	// Per-client: closing a client stops its renewals; its leases run
	// out within a TTL of their last renewal, spread over TTL/3.
	r.note("per-client sessions: the storm is the holders' clients closing, their leases expiring over TTL/3 rather than within one second")
	var wg sync.WaitGroup
	for _, c := range t.holders {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
	return time.Now().Add(-t.cfg.TTL / 3), nil
}
