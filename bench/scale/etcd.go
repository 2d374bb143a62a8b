package scale

import (
	"context"
	"errors"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
	"go.uber.org/zap"

	"github.com/lockgate/lockgate/bench/provision"
	"github.com/lockgate/lockgate/bench/report"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/lock"
)

// etcdScale is the same lease load on etcd, for comparison: a session is
// an etcd concurrency.Session (one etcd lease, kept alive by the client),
// a held lease a key put with the session's lease; the background
// workload is the zklike backend on the same cluster.
type etcdScale struct {
	cfg      *ScaleConfig
	procs    *servers.Etcd // nil with --servers
	urls     []string
	clients  []*clientv3.Client
	sessions []*concurrency.Session
	prober   lock.Locker
	prefix   string
}

func newEtcdScale(ctx context.Context, cfg *ScaleConfig) (*etcdScale, error) {
	t := &etcdScale{cfg: cfg, urls: cfg.Servers}
	if len(t.urls) == 0 {
		e, err := servers.StartEtcd(ctx, provision.EtcdMembers, servers.EtcdOptions{Log: servers.WriterLogger(cfg.Log)})
		if err != nil {
			return nil, err
		}
		t.procs, t.urls = e, e.Endpoints
	}
	p, err := t.locker(ctx)
	if err != nil {
		t.close()
		return nil, err
	}
	t.prober = p
	return t, nil
}

func (t *etcdScale) locker(ctx context.Context) (lock.Locker, error) {
	return (&provision.Servers{Spec: provision.Spec{Etcd: t.urls}}).Direct(ctx, provision.Etcd)
}

func (t *etcdScale) metricsAddrs() ([]string, []string) { return t.urls, t.urls }

func (t *etcdScale) metricNames() scaleMetricNames {
	return scaleMetricNames{
		leader:   func(s *promSample) bool { return s.value(mEtcdLeader) == 1 },
		locks:    mEtcdKeys,
		sessions: mEtcdLeases,
		renewals: func(s *promSample) (float64, bool) { return s.get(mEtcdKeepAlives) },
		entries:  "etcd_server_proposals_committed_total",
		renewSrc: mEtcdKeepAlives + " (keep-alive requests)",
	}
}

func (t *etcdScale) background(ctx context.Context, n int) ([]lock.Locker, error) {
	ls := make([]lock.Locker, n)
	for i := range ls {
		l, err := t.locker(ctx)
		if err != nil {
			return nil, err
		}
		ls[i] = l
	}
	return ls, nil
}

func (t *etcdScale) load(ctx context.Context, r *scaleRun) error {
	cfg := t.cfg
	t.prefix = r.prefix
	n := max(1, (cfg.Sessions+scaleSessionsPerConn-1)/scaleSessionsPerConn)
	r.rep.SessionMode, r.rep.Connections, r.rep.KeepAlivesSent = "etcd-lease", n, -1
	for range n {
		c, err := clientv3.New(clientv3.Config{Endpoints: t.urls, DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
		if err != nil {
			return err
		}
		t.clients = append(t.clients, c)
	}
	t.sessions = make([]*concurrency.Session, cfg.Sessions)
	ttl := max(1, int(cfg.TTL/time.Second))
	err := parallel(ctx, cfg.Sessions, 64, func(ctx context.Context, j int) error {
		s, err := concurrency.NewSession(t.clients[j%n], concurrency.WithTTL(ttl), concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			return fmt.Errorf("scale: etcd session %d: %w", j, err)
		}
		t.sessions[j] = s
		return nil
	})
	if err != nil {
		return err
	}
	r.progress("%d etcd sessions open", cfg.Sessions)
	type batch struct{ session, from int }
	var batches []batch
	for j := range cfg.Sessions {
		for from := j; from < cfg.Leases; from += scaleBatch * cfg.Sessions {
			batches = append(batches, batch{j, from})
		}
	}
	return parallel(ctx, len(batches), 64, func(ctx context.Context, bi int) error {
		b := batches[bi]
		s := t.sessions[b.session]
		var ops []clientv3.Op
		for i, k := b.from, 0; i < cfg.Leases && k < scaleBatch; i, k = i+cfg.Sessions, k+1 {
			ops = append(ops, clientv3.OpPut(fmt.Sprintf("%s/k/%d", r.prefix, i), "held", clientv3.WithLease(s.Lease())))
		}
		pctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		defer cancel()
		if _, err := t.clients[b.session%n].Txn(pctx).Then(ops...).Commit(); err != nil {
			return fmt.Errorf("scale: etcd put: %w", err)
		}
		return nil
	})
}

func (t *etcdScale) waiters(ctx context.Context, r *scaleRun) error {
	r.note("waiting connections and FIFO release: do not apply to etcd (waiters are the gateway's WebSocket connections)")
	return nil
}

func (t *etcdScale) snapshot(ctx context.Context, r *scaleRun) error {
	return errors.New("snapshot: does not apply to etcd (it snapshots on its own every --snapshot-count entries)")
}

// leaderMember is the provisioned member that says it leads.
func (t *etcdScale) leaderMember(ctx context.Context) (*servers.EtcdMember, []*servers.EtcdMember) {
	var ld *servers.EtcdMember
	var others []*servers.EtcdMember
	for _, m := range t.procs.Members {
		if s, err := scrape(ctx, m.ClientURL); err == nil && s.value(mEtcdLeader) == 1 {
			ld = m
		} else if m.PID() != 0 {
			others = append(others, m)
		}
	}
	return ld, others
}

func (t *etcdScale) restartFollower(ctx context.Context, r *scaleRun) error {
	if t.procs == nil {
		return errors.New("follower restart: not measured with --servers")
	}
	ld, others := t.leaderMember(ctx)
	if ld == nil || len(others) == 0 {
		return errors.New("follower restart: no leader and follower found")
	}
	f := others[0]
	f.Stop()
	t0 := time.Now()
	if err := f.Restart(); err != nil {
		return fmt.Errorf("follower restart: %w", err)
	}
	d := report.Millis(time.Since(t0))
	r.rep.Restore = &ScaleRestore{Node: f.ClientURL, ServeMs: d, CaughtUpMs: d, ServerSeconds: -1}
	r.progress("etcd follower %s restarted: healthy in %.0f ms", f.Name, d)
	return nil
}

func (t *etcdScale) killLeader(ctx context.Context, r *scaleRun) error {
	if t.procs == nil {
		return errors.New("failover: not measured with --servers")
	}
	ld, _ := t.leaderMember(ctx)
	if ld == nil {
		return errors.New("failover: no leader found")
	}
	f := &ScaleFailover{Killed: ld.ClientURL}
	r.rep.Failover = f
	ld.Kill()
	if err := firstGrant(ctx, r, t.prober, f); err != nil {
		return err
	}
	r.progress("etcd leader %s killed: first grant after %.0f ms", ld.Name, f.GrantMs)
	if err := ld.Restart(); err != nil {
		return fmt.Errorf("failover: restarting the killed leader: %w", err)
	}
	return nil
}

func (t *etcdScale) lost(ctx context.Context, r *scaleRun) (int, int, error) {
	sessions := 0
	for _, s := range t.sessions {
		select {
		case <-s.Done():
			sessions++
		default:
		}
	}
	gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := t.clients[0].Get(gctx, t.prefix+"/k/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, sessions, err
	}
	return t.cfg.Leases - int(resp.Count), sessions, nil
}

func (t *etcdScale) stopKeepAlive(ctx context.Context, r *scaleRun) (time.Time, error) {
	for _, s := range t.sessions {
		s.Orphan()
	}
	n := len(t.clients)
	err := parallel(ctx, len(t.sessions), 64, func(ctx context.Context, j int) error {
		kctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		_, err := t.clients[j%n].KeepAliveOnce(kctx, t.sessions[j].Lease())
		return err
	})
	if err != nil {
		r.note("the last keep-alive burst: %v", err)
	}
	return time.Now(), nil
}

func (t *etcdScale) renewalsSent() int64 { return -1 }

func (t *etcdScale) close() {
	closeAll(t.clients)
	if t.prober != nil {
		t.prober.Close()
	}
	if t.procs != nil {
		t.procs.Close()
	}
}
