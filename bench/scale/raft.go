package scale

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
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
		policy, err := writeScalePolicy(cfg)
		if err != nil {
			return nil, err
		}
		t.closeFns = append(t.closeFns, func() { os.RemoveAll(filepath.Dir(policy)) })
		// No connection caps: the bench's waiters all come from 127.0.0.1.
		// The bench is one identity: its quotas fit the run.
		c, err := servers.StartRaftlock(ctx, cfg.Lockgate, provision.RaftNodes, servers.RaftlockOptions{
			Log: servers.WriterLogger(cfg.Log),
			Args: func(int, []*servers.RaftNode) []string {
				return []string{"--max-conns", "0", "--max-conns-per-ip", "0", "--policy-file", policy}
			},
		})
		if err != nil {
			t.close()
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

// scalePolicy is the tenants' policy of the nodes the scale bench starts:
// every client of the bench is one identity (anonymous), so its quotas are
// the run's sizes plus the defaults' room for the background workload, the
// prober and the waiters of both kinds.
func scalePolicy(cfg *ScaleConfig) []byte {
	b, _ := json.Marshal(map[string]any{"defaults": map[string]int{ // plain values: never fails
		"sessions": cfg.Sessions + gateway.DefaultQuotaSessions,
		"leases":   cfg.Leases + gateway.DefaultQuotaLeases,
		"waiters":  2*cfg.Waiters + gateway.DefaultQuotaWaiters,
	}})
	return b
}

// writeScalePolicy writes scalePolicy to a file in a directory of its own
// and returns its path.
func writeScalePolicy(cfg *ScaleConfig) (string, error) {
	dir, err := os.MkdirTemp("", "lockgate-scale-policy-")
	if err != nil {
		return "", err
	}
	path := filepath.Join(dir, "policy.json")
	if err := os.WriteFile(path, scalePolicy(cfg), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	return path, nil
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
	for provision.SleepCtx(k.ctx, k.ttl/3) {
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
				kit.SessionRefused(s, err)
				return nil
			case ctx.Err() != nil, time.Now().After(s.Deadline()):
				return nil
			}
			if !provision.SleepCtx(ctx, min(time.Duration(attempt)*50*time.Millisecond, time.Second)) {
				return nil
			}
		}
		return nil
	})
}
