package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
)

// raftScale is the scale bench on raftlock: `lockgate node` processes
// (or --servers) through the gateway protocol and the Go SDK.
type raftScale struct {
	cfg   *ScaleConfig
	procs *servers.Raftlock // nil with --servers
	addrs []string

	holders  []*client.Client
	sessions []*lock.Session      // explicit mode
	sls      []lock.SessionLocker // the session's connection, by session
	leases   [][]*lock.Lease      // by session (explicit) or by client
	keys     []string             // every held key, in acquisition order
	keeper   *sessionKeeper       // explicit mode
	prober   *client.Client       // times the failover
	closeFns []func()
}

func newRaftScale(ctx context.Context, cfg *ScaleConfig) (*raftScale, error) {
	t := &raftScale{cfg: cfg, addrs: cfg.Servers}
	if len(t.addrs) == 0 {
		// No connection caps: the bench's waiters all come from 127.0.0.1.
		c, err := servers.StartRaftlock(ctx, cfg.Lockgate, RaftNodes, servers.RaftlockOptions{
			Log: servers.WriterLogger(cfg.Log),
			Args: func(int, []*servers.RaftNode) []string {
				return []string{"--max-conns", "0", "--max-conns-per-ip", "0"}
			},
		})
		if err != nil {
			return nil, err
		}
		t.procs, t.addrs = c, c.APIAddrs
	}
	p, err := client.New(t.addrs, client.Options{ClientID: "scale-prober"})
	if err != nil {
		t.close()
		return nil, err
	}
	t.prober = p
	return t, nil
}

func (t *raftScale) metricsAddrs() ([]string, []string) { return t.addrs, t.addrs }

func (t *raftScale) metricNames() scaleMetricNames {
	return scaleMetricNames{
		leader:   func(s *promSample) bool { return s.value(mLeaderReady) == 1 },
		locks:    mLocks,
		sessions: mSessions,
		renewals: func(s *promSample) (float64, bool) {
			var sum float64
			found := false
			for _, op := range renewOps {
				if v, ok := s.get(mOps, "op", op); ok {
					sum += v
					found = true
				}
			}
			return sum, found
		},
		entries:  mCommitIndex,
		renewSrc: `lockgate_raftlock_ops_total{op="renew"|"session-renew"}`,
	}
}

func (t *raftScale) background(ctx context.Context, n int) ([]lock.Locker, error) {
	ls := make([]lock.Locker, n)
	for i := range ls {
		c, err := client.New(t.addrs, client.Options{ClientID: fmt.Sprintf("scale-bg-%d", i)})
		if err != nil {
			return nil, err
		}
		ls[i] = c
	}
	return ls, nil
}

// connections is how many connections hold perSession[j] leases of
// session j, session j on connection j % n: the fewest that keep every
// connection within the gateway's sessions and leases per connection.
func connections(perSession []int) int {
	n := max(1, (len(perSession)+scaleSessionsPerConn-1)/scaleSessionsPerConn)
	for ; n < len(perSession); n++ { // a connection per session fits: fill checks every session fits on one
		load := make([]int, n)
		ok := true
		for j, k := range perSession {
			load[j%n] += k
			if load[j%n] > scaleLeasesPerConn {
				ok = false
				break
			}
		}
		if ok {
			return n
		}
	}
	return n
}

func (t *raftScale) load(ctx context.Context, r *scaleRun) error {
	cfg := t.cfg
	t.keys = make([]string, cfg.Leases)
	for i := range t.keys {
		t.keys[i] = fmt.Sprintf("%s/k/%d", r.prefix, i)
	}
	perSession := make([]int, cfg.Sessions)
	for i := range cfg.Leases {
		perSession[i%cfg.Sessions]++
	}
	n := connections(perSession)
	// Try the first connection for sessions: a SessionLocker whose
	// gateway has them.
	first, err := client.New(t.addrs, client.Options{ClientID: "scale-h-0"})
	if err != nil {
		return err
	}
	t.holders = append(t.holders, first)
	explicit := false
	if sl, ok := any(first).(lock.SessionLocker); ok {
		octx, cancel := context.WithTimeout(ctx, 30*time.Second)
		s, err := sl.OpenSession(octx, lock.SessionOptions{TTL: cfg.TTL, Owner: "scale-s-0"})
		cancel()
		switch {
		case err == nil:
			explicit = true
			t.sessions = append(t.sessions, s)
		case errors.Is(err, lock.ErrUnsupported):
			r.note("the gateway has no sessions (%v): each connection's auto-renewed leases are its session", err)
		default:
			return fmt.Errorf("scale: opening a session: %w", err)
		}
	} else {
		r.note("the Go SDK is no lock.SessionLocker yet: each connection's auto-renewed leases (AcquireOptions{}) are its session")
	}
	if !explicit {
		// Per-client: a connection's auto-renewed leases are its session.
		n = max(cfg.Sessions, (cfg.Leases+scaleLeasesPerConn-1)/scaleLeasesPerConn)
		perSession = make([]int, n)
		for i := range cfg.Leases {
			perSession[i%n]++
		}
		r.rep.SessionMode, r.rep.Sessions = "per-client", n
		r.rep.KeepAlivesSent = -1
	} else {
		r.rep.SessionMode = "explicit"
	}
	r.rep.Connections = n
	for i := 1; i < n; i++ {
		c, err := client.New(t.addrs, client.Options{ClientID: fmt.Sprintf("scale-h-%d", i)})
		if err != nil {
			return err
		}
		t.holders = append(t.holders, c)
	}
	groups := len(perSession)
	t.leases = make([][]*lock.Lease, groups)
	if explicit {
		t.sessions = append(t.sessions, make([]*lock.Session, cfg.Sessions-1)...)
		t.sls = make([]lock.SessionLocker, cfg.Sessions)
		for j := range t.sls {
			t.sls[j] = any(t.holders[j%n]).(lock.SessionLocker)
		}
		err := parallel(ctx, cfg.Sessions-1, 64, func(ctx context.Context, i int) error {
			j := i + 1
			octx, cancel := context.WithTimeout(ctx, 30*time.Second)
			defer cancel()
			s, err := t.sls[j].OpenSession(octx, lock.SessionOptions{TTL: cfg.TTL, Owner: fmt.Sprintf("scale-s-%d", j)})
			if err != nil {
				return fmt.Errorf("scale: opening session %d: %w", j, err)
			}
			t.sessions[j] = s
			return nil
		})
		if err != nil {
			return err
		}
		t.keeper = newSessionKeeper(t.sls, t.sessions, cfg.TTL)
		t.closeFns = append(t.closeFns, t.keeper.stop)
		go t.keeper.run()
		r.progress("%d sessions open, kept alive every %v", cfg.Sessions, cfg.TTL/3)
	}
	// Batches of up to scaleBatch keys of one group (session or client).
	type batch struct {
		group int
		keys  []int
	}
	var batches []batch
	for g := range groups {
		var cur []int
		for i := g; i < cfg.Leases; i += groups {
			cur = append(cur, i)
			if len(cur) == scaleBatch {
				batches = append(batches, batch{g, cur})
				cur = nil
			}
		}
		if len(cur) > 0 {
			batches = append(batches, batch{g, cur})
		}
	}
	var mu sync.Mutex
	var done atomic.Int64
	multi := atomic.Bool{}
	multi.Store(true)
	stopProgress := make(chan struct{})
	go func() {
		tk := time.NewTicker(5 * time.Second)
		defer tk.Stop()
		for {
			select {
			case <-stopProgress:
				return
			case <-tk.C:
				r.progress("acquired %d of %d leases", done.Load(), cfg.Leases)
			}
		}
	}()
	defer close(stopProgress)
	err = parallel(ctx, len(batches), min(8*n, 1024), func(ctx context.Context, bi int) error {
		b := batches[bi]
		c := t.holders[b.group%n]
		opts := lock.AcquireOptions{}
		if explicit {
			opts.Session = t.sessions[b.group]
		}
		keys := make([]string, len(b.keys))
		for i, k := range b.keys {
			keys[i] = t.keys[k]
		}
		actx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		var got []*lock.Lease
		if multi.Load() {
			ls, err := c.AcquireAll(actx, keys, opts)
			if errors.Is(err, lock.ErrUnsupported) {
				multi.Store(false)
			} else if err != nil {
				return fmt.Errorf("scale: acquiring %d keys in %s: %w", len(keys), c.ClientID(), err)
			} else {
				got = ls
			}
		}
		if got == nil {
			for _, k := range keys {
				l, err := c.Acquire(actx, k, opts)
				if err != nil {
					return fmt.Errorf("scale: acquiring %s: %w", k, err)
				}
				got = append(got, l)
			}
		}
		mu.Lock()
		t.leases[b.group] = append(t.leases[b.group], got...)
		mu.Unlock()
		done.Add(int64(len(got)))
		return nil
	})
	return err
}

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
		if !sleepCtx(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
}

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
	s := &ScaleSnapshot{RequestMs: ms(d), ServerSeconds: -1}
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
	rs := &ScaleRestore{Node: f.APIAddr, ServeMs: ms(time.Since(t0)), ServerSeconds: -1}
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); {
		s, err := scrape(ctx, f.APIAddr)
		if err == nil && s.value(mAppliedIndex) >= target {
			rs.CaughtUpMs = ms(time.Since(t0))
			if v, ok := s.get(mRestoreSecs); ok {
				rs.ServerSeconds = v
			}
			break
		}
		if !sleepCtx(ctx, 20*time.Millisecond) {
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
			f.GrantMs, f.Granted = ms(time.Since(t0)), true
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

func (t *raftScale) renewalsSent() int64 {
	if t.keeper == nil {
		return -1
	}
	return t.keeper.sent.Load()
}

func (t *raftScale) close() {
	for _, f := range t.closeFns {
		f()
	}
	closeAll(t.holders)
	if t.prober != nil {
		t.prober.Close()
	}
	if t.procs != nil {
		t.procs.Close()
	}
}

// closeAll closes every client at once (each may wait on its server).
func closeAll[C interface{ Close() error }](cs []C) {
	var wg sync.WaitGroup
	for _, c := range cs {
		wg.Add(1)
		go func() { defer wg.Done(); c.Close() }()
	}
	wg.Wait()
}

// sessionKeeper keeps sessions alive: every TTL/3 one burst renews them
// all. stop ends it (the sessions then run out a TTL after the last).
type sessionKeeper struct {
	sls      []lock.SessionLocker
	sessions []*lock.Session
	ttl      time.Duration
	sent     atomic.Int64
	ctx      context.Context
	cancel   context.CancelFunc
	done     chan struct{}
	once     sync.Once
}

func newSessionKeeper(sls []lock.SessionLocker, sessions []*lock.Session, ttl time.Duration) *sessionKeeper {
	ctx, cancel := context.WithCancel(context.Background())
	return &sessionKeeper{sls: sls, sessions: sessions, ttl: ttl, ctx: ctx, cancel: cancel, done: make(chan struct{})}
}

func (k *sessionKeeper) run() {
	defer close(k.done)
	for sleepCtx(k.ctx, k.ttl/3) {
		k.burst(k.ctx)
	}
}

func (k *sessionKeeper) stop() {
	k.once.Do(func() {
		k.cancel()
		<-k.done
	})
}

// burst renews every session once (transient failures retried while the
// session's deadline allows).
func (k *sessionKeeper) burst(ctx context.Context) {
	parallel(ctx, len(k.sessions), 64, func(ctx context.Context, i int) error {
		s := k.sessions[i]
		for attempt := 1; s.Err() == nil; attempt++ {
			rctx, cancel := context.WithDeadline(ctx, s.Deadline())
			k.sent.Add(1)
			err := k.sls[i].RenewSession(rctx, s)
			cancel()
			switch {
			case err == nil:
				return nil
			case errors.Is(err, lock.ErrSessionExpired), errors.Is(err, lock.ErrNotHeld):
				s.Refused(err)
				return nil
			case ctx.Err() != nil, time.Now().After(s.Deadline()):
				return nil
			}
			if !sleepCtx(ctx, min(time.Duration(attempt)*50*time.Millisecond, time.Second)) {
				return nil
			}
		}
		return nil
	})
}
