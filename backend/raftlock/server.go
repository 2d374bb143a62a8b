package raftlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/lockgate/lockgate/internal/netguard"
	"github.com/lockgate/lockgate/lock"
)

// Server is a Node with its API address served over HTTP: the membership
// endpoints now, and whatever else is mounted on Mux (the gateway).
type Server struct {
	*Node
	Mux  *http.ServeMux
	http *http.Server
	ln   net.Listener
}

// StartServer listens on cfg.APIListen (default cfg.APIAddr; port 0 picks a
// free port, which then becomes the advertised API address; with cfg.TLS,
// it serves only TLS), starts the
// node, serves its API, and,
// when join lists seed API addresses, asks the cluster to add it, retrying
// until ctx ends.
func StartServer(ctx context.Context, cfg Config, join []string) (*Server, error) {
	cfg.fill()
	// Before listening: a refused configuration (say, a Raft port without
	// peer authentication) is reported as such, not as a busy API port.
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	listen := cfg.APIListen
	if listen == "" {
		listen = cfg.APIAddr
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("raftlock: API listen on %s: %w", listen, err)
	}
	// The caps apply before TLS: a refused connection costs no handshake.
	ln = netguard.Listen(ln, cfg.HTTPLimits, cfg.Logger.With("node", cfg.ID, "listener", "api"))
	if cfg.APIListen == "" {
		cfg.APIAddr = ln.Addr().String()
	}
	if cfg.TLS != nil {
		// Only TLS: a plaintext HTTP request fails the handshake (Go's
		// server answers it 400 "client sent an HTTP request to an HTTPS
		// server").
		ln = tls.NewListener(ln, cfg.TLS.APIServerConfig())
	}
	n, err := New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	s := &Server{Node: n, Mux: http.NewServeMux(), ln: ln}
	s.Mux.Handle("/v1/cluster/", n.Handler())
	s.Mux.Handle("/v1/debug/", n.Handler())
	if cfg.FaultInjection {
		s.Mux.HandleFunc("POST "+PathDebugClock, n.handleDebugClock)
	}
	// Connection-level errors (a plaintext client at a TLS port, a client
	// certificate refused) are the client's problem: debug level.
	s.http = netguard.NewServer(s.Mux, cfg.HTTPLimits, slog.NewLogLogger(n.log.Handler(), slog.LevelDebug))
	go s.http.Serve(ln)
	if len(join) > 0 {
		args := JoinArgs{ServerID: cfg.ID, ServerAddr: n.RaftAddr(), APIAddr: cfg.APIAddr, Reads: n.fsm.ReadsFormat()}
		for {
			_, err := n.members.Join(ctx, join, args)
			if err == nil {
				break
			}
			if args.Reads != 0 && strings.Contains(err.Error(), `unknown field "reads"`) {
				// A leader older than the format gate refuses the field:
				// join without it (a leader that knows the gate asks this
				// node's status instead).
				args.Reads = 0
				continue
			}
			n.log.Info("join: retrying", "seeds", join, "err", err)
			select {
			case <-ctx.Done():
				s.Shutdown()
				return nil, fmt.Errorf("raftlock: joining %v: %w", join, errors.Join(err, ctx.Err()))
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	return s, nil
}

// Shutdown stops serving the API, then the node.
func (s *Server) Shutdown() error { return s.stop(true) }

func (s *Server) stop(transfer bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	s.http.Shutdown(ctx)
	return s.Node.stop(transfer)
}

// WaitLeader waits until some node of nodes is a ready leader.
func WaitLeader(ctx context.Context, nodes ...*Node) (*Node, error) {
	for {
		for _, n := range nodes {
			if n != nil && n.IsLeader() {
				return n, nil
			}
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("raftlock: no leader: %w", ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// LocalCluster is a cluster of Servers in one process (`lockgate cluster`,
// tests, benchmarks). Node i has id "i" and data dir DIR/node-i; node 1
// bootstraps and the others join it.
type LocalCluster struct {
	Servers []*Server
}

// StartLocalCluster starts size servers under dataDir and waits for a
// leader. configure, if not nil, adjusts each node's Config (addresses,
// timing) before it starts.
//
// If dataDir already holds the cluster (a restart), every node starts from
// its own state at once and none joins: a lone first node could not elect
// itself in a cluster that already has several members.
func StartLocalCluster(ctx context.Context, size int, dataDir string, configure func(*Config)) (*LocalCluster, error) {
	c := &LocalCluster{}
	_, err := os.Stat(filepath.Join(dataDir, "node-1"))
	restart := err == nil
	for i := 1; i <= size; i++ {
		cfg := DefaultConfig(strconv.Itoa(i))
		cfg.DataDir = filepath.Join(dataDir, "node-"+cfg.ID)
		cfg.Bootstrap = i == 1
		if configure != nil {
			configure(&cfg)
		}
		var join []string
		if i > 1 && !restart {
			if _, err := WaitLeader(ctx, c.Nodes()...); err != nil {
				c.Shutdown()
				return nil, err
			}
			join = []string{c.Servers[0].APIAddr()}
		}
		s, err := StartServer(ctx, cfg, join)
		if err != nil {
			c.Shutdown()
			return nil, err
		}
		c.Servers = append(c.Servers, s)
	}
	if _, err := WaitLeader(ctx, c.Nodes()...); err != nil {
		c.Shutdown()
		return nil, err
	}
	return c, nil
}

// Nodes returns the running nodes.
func (c *LocalCluster) Nodes() []*Node {
	var ns []*Node
	for _, s := range c.Servers {
		if s != nil {
			ns = append(ns, s.Node)
		}
	}
	return ns
}

// Leader waits for and returns the ready leader.
func (c *LocalCluster) Leader(ctx context.Context) (*Node, error) {
	return WaitLeader(ctx, c.Nodes()...)
}

// Shutdown stops every server.
func (c *LocalCluster) Shutdown() {
	for _, s := range c.Servers {
		if s != nil {
			s.stop(false) // all go: no leadership to hand over
		}
	}
}

// Locker returns a lock.Locker over the whole local cluster: every call
// goes to the current leader, and a call that meets a leader change (a
// redirect) is re-sent to the new leader, up to DefaultMaxJoinHops times.
// Acquires are re-sent with the same handle, so a grant that committed just
// before the change is returned rather than waited behind. Close ends this
// Locker's waits and calls, not the cluster.
func (c *LocalCluster) Locker() lock.Locker {
	ctx, cancel := context.WithCancel(context.Background())
	return &clusterLocker{c: c, ctx: ctx, cancel: cancel}
}

type clusterLocker struct {
	c      *LocalCluster
	ctx    context.Context
	cancel context.CancelFunc
}

var (
	_ lock.MultiLocker     = (*clusterLocker)(nil)
	_ lock.Watcher         = (*clusterLocker)(nil)
	_ lock.FeatureReporter = (*clusterLocker)(nil)
)

// Features implements lock.FeatureReporter: what the nodes offer (their
// format gate, replicated; read from the first node).
func (cl *clusterLocker) Features() lock.Features {
	for _, n := range cl.c.Nodes() {
		return n.Features()
	}
	return features
}

func (cl *clusterLocker) AcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return cl.acquireAll(ctx, keys, opts, (*Node).AcquireAll)
}

func (cl *clusterLocker) TryAcquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions) ([]*lock.Lease, error) {
	return cl.acquireAll(ctx, keys, opts, (*Node).TryAcquireAll)
}

func (cl *clusterLocker) acquireAll(ctx context.Context, keys []string, opts lock.AcquireOptions,
	f func(*Node, context.Context, []string, lock.AcquireOptions) ([]*lock.Lease, error)) ([]*lock.Lease, error) {
	opts, autoRenew := renewedHere(opts)
	var leases []*lock.Lease
	err := cl.retry(ctx, func(ctx context.Context, n *Node) error {
		var err error
		leases, err = f(n, ctx, keys, opts)
		return err
	})
	if err == nil && autoRenew {
		for _, lease := range leases {
			go lock.KeepAlive(cl.ctx, cl, lease)
		}
	}
	return leases, err
}

// Watch implements lock.Watcher on the current leader's applied state;
// the watch ends (EventError) if that node shuts down, and when this
// Locker is closed.
func (cl *clusterLocker) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	return cl.watch(ctx, func(ctx context.Context, n *Node) (<-chan lock.Event, error) { return n.Watch(ctx, key) })
}

// watch opens a watch with open on the current leader, retried as the
// Locker's calls are; it ends with ctx or when this Locker is closed.
func (cl *clusterLocker) watch(ctx context.Context, open func(context.Context, *Node) (<-chan lock.Event, error)) (<-chan lock.Event, error) {
	if cl.ctx.Err() != nil {
		return nil, lock.ErrClosed
	}
	wctx, cancel := context.WithCancel(ctx)
	stop := context.AfterFunc(cl.ctx, cancel)
	var ch <-chan lock.Event
	err := cl.retry(ctx, func(_ context.Context, n *Node) error {
		var err error
		ch, err = open(wctx, n)
		return err
	})
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	return ch, nil
}

// retry runs op on the current leader until it returns something other
// than a redirect.
func (cl *clusterLocker) retry(ctx context.Context, op func(context.Context, *Node) error) error {
	if cl.ctx.Err() != nil {
		return lock.ErrClosed
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	unhook := context.AfterFunc(cl.ctx, func() { stop(lock.ErrClosed) })
	defer unhook()
	var err error
	for range DefaultMaxJoinHops {
		var l *Node
		if l, err = cl.c.Leader(ctx); err != nil {
			break
		}
		if err = op(ctx, l); !errors.Is(err, lock.ErrNotLeader) && !errors.Is(err, lock.ErrClosed) {
			break
		}
	}
	if cl.ctx.Err() != nil {
		return lock.ErrClosed
	}
	return err
}

func (cl *clusterLocker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return cl.acquire(ctx, key, opts, (*Node).Acquire)
}

func (cl *clusterLocker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return cl.acquire(ctx, key, opts, (*Node).TryAcquire)
}

// renewedHere readies the options of an acquire the clusterLocker sends to
// whichever node leads: the handle is chosen here (so that a re-sent acquire
// names the same holder), the TTL defaulted, and auto-renewal taken off the
// node; autoRenew reports whether the clusterLocker must renew the lease
// itself (lock.KeepAlive, through whichever node leads).
func renewedHere(opts lock.AcquireOptions) (_ lock.AcquireOptions, autoRenew bool) {
	if opts.Handle == "" {
		opts.Handle = lock.NewHandle()
	}
	if opts.Session != nil {
		return opts, false // its session's keep-alive renews it
	}
	autoRenew = opts.AutoRenew || opts.TTL == 0
	if opts.TTL == 0 {
		opts.TTL = lock.DefaultTTL
	}
	opts.AutoRenew = false // renewed here, through whichever node leads
	return opts, autoRenew
}

func (cl *clusterLocker) acquire(ctx context.Context, key string, opts lock.AcquireOptions,
	f func(*Node, context.Context, string, lock.AcquireOptions) (*lock.Lease, error)) (*lock.Lease, error) {
	opts, autoRenew := renewedHere(opts)
	var lease *lock.Lease
	err := cl.retry(ctx, func(ctx context.Context, n *Node) error {
		var err error
		lease, err = f(n, ctx, key, opts)
		return err
	})
	if err == nil && autoRenew {
		go lock.KeepAlive(cl.ctx, cl, lease)
	}
	return lease, err
}

func (cl *clusterLocker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	return cl.retry(ctx, func(ctx context.Context, n *Node) error { return n.Renew(ctx, lease, ttl) })
}

// Release re-sends a release cut off by a leader change. The first attempt
// may have committed before the old leader fell, so a re-sent one that
// finds the lock gone before the lease's deadline — when no leader can
// have expired it — reports the release as done, not ErrNotHeld.
func (cl *clusterLocker) Release(ctx context.Context, lease *lock.Lease) error {
	var r resentRelease
	return cl.retry(ctx, func(ctx context.Context, n *Node) error { return r.outcome(lease, n.Release(ctx, lease)) })
}

// resentRelease judges the attempts of one release (see Release).
type resentRelease struct{ cutOff bool }

func (r *resentRelease) outcome(lease *lock.Lease, err error) error {
	if r.cutOff && errors.Is(err, lock.ErrNotHeld) && time.Now().Before(lease.Deadline()) {
		return nil
	}
	r.cutOff = r.cutOff || errors.Is(err, lock.ErrNotLeader)
	return err
}

func (cl *clusterLocker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	var info *lock.LockInfo
	err := cl.retry(ctx, func(ctx context.Context, n *Node) error {
		var err error
		info, err = n.Inspect(ctx, key)
		return err
	})
	return info, err
}

// SignalsWanted implements lock.WantedSignaler: the leader's leases are
// told when a caller queues for their key.
func (cl *clusterLocker) SignalsWanted() bool { return true }

func (cl *clusterLocker) Close() error {
	cl.cancel()
	return nil
}
