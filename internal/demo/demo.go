// Package demo is `lockgate demo`: a three-node raftlock cluster with the
// gateway on every node, the fenced store, and SDK clients contending for a
// few keys, all in one process and a temporary directory. Midway it stops
// the leader, and it pauses one client past its TTL so that the fenced
// store rejects its late write. It ends with a summary.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/check"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/fencedstore"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/netguard"
	"github.com/lockgate/lockgate/lock"
)

// Config sets the demo's size and length.
type Config struct {
	Duration time.Duration // total run time (default 20 s)
	Clients  int           // contending SDK clients (default 6)
	Keys     []string      // contended keys (default orders, invoices)
	Logger   *slog.Logger  // default: discard
	// Started, if not nil, is called with the web console's URL once the
	// cluster serves it, before the clients start.
	Started func(consoleURL string)
}

// Summary is what the demo measured.
type Summary struct {
	Grants          int
	Handoffs        int // grants of a key right after another client held it
	Writes          uint64
	StaleRejected   uint64 // late writes the fenced store refused
	Overlaps        int    // holds of one key that overlapped (must be 0)
	TokenRegresses  int    // tokens that went backwards (must be 0)
	Failover        time.Duration
	OldLeader       string
	NewLeader       string
	ClientErrors    int
	LateWriteStatus string
	ConsoleURL      string // the web console of a node the failover does not stop
}

func (c *Config) fill() {
	if c.Duration <= 0 {
		c.Duration = 20 * time.Second
	}
	if c.Clients <= 0 {
		c.Clients = 6
	}
	if len(c.Keys) == 0 {
		c.Keys = []string{"orders", "invoices"}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
}

// Run runs the demo, printing progress to out, and cleans up after itself.
func Run(ctx context.Context, cfg Config, out io.Writer) (Summary, error) {
	cfg.fill()
	out = &lockedWriter{w: out} // progress and events print from several goroutines
	var sum Summary
	dir, err := os.MkdirTemp("", "lockgate-demo-")
	if err != nil {
		return sum, err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(out, "starting a 3-node raftlock cluster, a gateway on each node, and the fenced store in %s\n", dir)
	startCtx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cluster, err := raftlock.StartLocalCluster(startCtx, 3, filepath.Join(dir, "raft"), func(c *raftlock.Config) {
		c.RaftAddr, c.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		c.HeartbeatTimeout, c.ElectionTimeout, c.LeaderLeaseTimeout = 500*time.Millisecond, 500*time.Millisecond, 250*time.Millisecond
		c.Logger = cfg.Logger
	})
	if err != nil {
		return sum, err
	}
	defer cluster.Shutdown()
	var endpoints []string
	for _, s := range cluster.Servers {
		defer raftgw.Serve(s, gateway.Options{Logger: cfg.Logger}).Close()
		endpoints = append(endpoints, s.APIAddr())
	}
	// The console of a follower: the failover stops the leader, and the
	// page stays up to show it.
	l, err := cluster.Leader(startCtx)
	if err != nil {
		return sum, err
	}
	for _, s := range cluster.Servers {
		if s.Node != l {
			sum.ConsoleURL = "http://" + s.APIAddr() + "/ui/"
			fmt.Fprintf(out, "web console: %s (node %s, a follower: it stays up through the failover; --duration 2m to watch longer)\n", sum.ConsoleURL, s.ID())
			break
		}
	}
	if cfg.Started != nil {
		cfg.Started(sum.ConsoleURL)
	}
	store, storeURL, stopStore, err := startStore(filepath.Join(dir, "store.log"), cfg.Logger)
	if err != nil {
		return sum, err
	}
	defer stopStore()
	fs := fencedstore.NewClient(storeURL, nil)

	r := &runner{cfg: cfg, endpoints: endpoints, fs: fs, out: out}
	runCtx, stop := context.WithTimeout(ctx, cfg.Duration)
	defer stop()
	var wg sync.WaitGroup
	for i := range cfg.Clients {
		wg.Add(1)
		go func() { defer wg.Done(); r.contend(runCtx, fmt.Sprintf("client-%d", i)) }()
	}
	wg.Add(1)
	go func() { defer wg.Done(); r.progress(runCtx, cluster) }()

	// One third in: stop the leader.
	sleep(runCtx, cfg.Duration/3)
	sum.OldLeader, sum.NewLeader, sum.Failover, err = failover(runCtx, cluster)
	if err != nil {
		return sum, err
	}
	fmt.Fprintf(out, "stopped leader node %s; node %s took over in %v\n", sum.OldLeader, sum.NewLeader, sum.Failover.Round(time.Millisecond))

	// Halfway: a client pauses past its TTL and writes late.
	sleep(runCtx, cfg.Duration/6)
	sum.LateWriteStatus = r.pausedClient(runCtx)
	fmt.Fprintf(out, "paused client: %s\n", sum.LateWriteStatus)

	wg.Wait()
	st := store.Stats()
	vs := check.CheckHistory(r.rec.Holds())
	for _, v := range vs {
		switch v.Kind {
		case check.Overlap:
			sum.Overlaps++
		case check.TokenRegression, check.TokenRepeat:
			sum.TokenRegresses++
		}
	}
	sum.Grants, sum.Handoffs = r.grantsAndHandoffs()
	sum.Writes = st.Accepted
	sum.StaleRejected = st.Rejected
	sum.ClientErrors = int(r.errors.Load())
	return sum, nil
}

// startStore serves a fenced store on a free loopback port.
func startStore(path string, logger *slog.Logger) (*fencedstore.Store, string, func(), error) {
	s, err := fencedstore.Open(path, fencedstore.Options{Logger: logger})
	if err != nil {
		return nil, "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		s.Close()
		return nil, "", nil, err
	}
	srv := netguard.NewServer(fencedstore.NewHandler(s, fencedstore.HandlerOptions{Logger: logger}), netguard.Limits{}, nil)
	go srv.Serve(netguard.Listen(ln, netguard.Limits{}, logger))
	stop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		s.Close()
	}
	return s, "http://" + ln.Addr().String(), stop, nil
}

// failover stops the leader's server and waits for a new leader.
func failover(ctx context.Context, c *raftlock.LocalCluster) (old, nu string, took time.Duration, err error) {
	l, err := c.Leader(ctx)
	if err != nil {
		return "", "", 0, err
	}
	var rest []*raftlock.Node
	for _, s := range c.Servers {
		if s.Node == l {
			start := time.Now()
			s.Shutdown()
			for _, o := range c.Servers {
				if o != s {
					rest = append(rest, o.Node)
				}
			}
			n, err := raftlock.WaitLeader(ctx, rest...)
			if err != nil {
				return l.ID(), "", 0, err
			}
			return l.ID(), n.ID(), time.Since(start), nil
		}
	}
	return "", "", 0, errors.New("demo: leader not found among the servers")
}

type runner struct {
	cfg       Config
	endpoints []string
	fs        *fencedstore.Client
	out       io.Writer
	rec       check.Recorder
	grants    atomic.Int64
	errors    atomic.Int64
}

// contend is one client's loop: acquire a random key, write to the fenced
// store with the token, hold a moment, write again, release.
func (r *runner) contend(ctx context.Context, id string) {
	c, err := client.New(r.endpoints, client.Options{ClientID: id, Logger: r.cfg.Logger})
	if err != nil {
		r.errors.Add(1)
		return
	}
	defer c.Close()
	for ctx.Err() == nil {
		key := r.cfg.Keys[rand.IntN(len(r.cfg.Keys))]
		lease, err := c.Acquire(ctx, key, lock.AcquireOptions{TTL: 3 * time.Second})
		if err != nil {
			if ctx.Err() == nil {
				r.errors.Add(1)
			}
			continue
		}
		start := time.Now()
		r.grants.Add(1)
		w := fencedstore.WriteRequest{ClientID: id, Token: fencedstore.FencingToken{Key: key, Value: uint64(lease.Token)}, Data: id}
		wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := r.fs.Write(wctx, w); err != nil {
			r.errors.Add(1)
		}
		time.Sleep(time.Duration(5+rand.IntN(20)) * time.Millisecond)
		if err := r.fs.Write(wctx, w); err != nil {
			r.errors.Add(1)
		}
		cancel()
		end := time.Now()
		if d := lease.Deadline(); d.Before(end) {
			end = d
		}
		r.rec.Add(check.Hold{Key: key, Holder: id, Token: lease.Token, Start: start, End: end})
		rctx, rcancel := context.WithTimeout(context.Background(), 5*time.Second)
		if err := c.Release(rctx, lease); err != nil && !errors.Is(err, lock.ErrNotHeld) {
			r.errors.Add(1)
		}
		rcancel()
	}
}

// pausedClient holds a key, stalls past its TTL (a GC pause: it believes it
// still holds the lock), and writes late. Meanwhile another client takes the
// key and writes with a higher token, so the fenced store must refuse the
// late write.
func (r *runner) pausedClient(ctx context.Context) string {
	key := r.cfg.Keys[0]
	const ttl = time.Second
	p, err := client.New(r.endpoints, client.Options{ClientID: "paused-client", Logger: r.cfg.Logger})
	if err != nil {
		return "could not connect: " + err.Error()
	}
	defer p.Close()
	lease, err := p.Acquire(ctx, key, lock.AcquireOptions{TTL: ttl})
	if err != nil {
		return "could not acquire: " + err.Error()
	}
	start := time.Now()
	w := fencedstore.WriteRequest{ClientID: "paused-client", Token: fencedstore.FencingToken{Key: key, Value: uint64(lease.Token)}, Data: "before the pause"}
	r.fs.Write(ctx, w)
	r.rec.Add(check.Hold{Key: key, Holder: "paused-client", Token: lease.Token, Start: start, End: lease.Deadline()})
	// The pause: no renewal, no release; the lease runs out and others take
	// the key (the contending clients, every few milliseconds).
	next := r.waitForHigherToken(ctx, key, uint64(lease.Token))
	w.Data = "after the pause"
	err = r.fs.Write(context.Background(), w)
	switch {
	case errors.Is(err, fencedstore.ErrStaleToken):
		return fmt.Sprintf("held %q with token %d, stalled past its %v TTL, wrote late: rejected by the fenced store (token %d had written since)", key, lease.Token, ttl, next)
	case err == nil:
		return fmt.Sprintf("late write with token %d was ACCEPTED: fencing failed", lease.Token)
	default:
		return "late write failed: " + err.Error()
	}
}

// waitForHigherToken waits until the store has accepted a write to key
// with a token above token (someone took the key after the lease ran out).
func (r *runner) waitForHigherToken(ctx context.Context, key string, token uint64) uint64 {
	for {
		rec, found, err := r.fs.Read(ctx, key)
		if err == nil && found && rec.Token.Value > token {
			return rec.Token.Value
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return 0
		}
	}
}

// grantsAndHandoffs counts grants and the grants of a key whose previous
// holder was another client.
func (r *runner) grantsAndHandoffs() (grants, handoffs int) {
	last := map[string]string{}
	holds := r.rec.Holds()
	slices.SortFunc(holds, func(a, b check.Hold) int { return a.Start.Compare(b.Start) })
	for _, h := range holds {
		if prev, ok := last[h.Key]; ok && prev != h.Holder {
			handoffs++
		}
		last[h.Key] = h.Holder
	}
	return len(holds), handoffs
}

func (r *runner) progress(ctx context.Context, c *raftlock.LocalCluster) {
	start := time.Now()
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		leader := "(electing)"
		for _, n := range c.Nodes() {
			if n.IsLeader() {
				leader = "node " + n.ID()
			}
		}
		fmt.Fprintf(r.out, "  %2.0fs  grants %-5d leader %s\n", time.Since(start).Seconds(), r.grants.Load(), leader)
	}
}

// sleep waits d or until ctx ends; false if ctx ended.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}
