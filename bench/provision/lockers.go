package provision

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/propagation"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/netguard"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// Paths a client takes to a backend, as `--via` spells them.
const (
	// Direct is the backend's own Go Locker in the bench process. For
	// raftlock, whose servers are separate processes, that is the SDK
	// speaking the nodes' own client protocol: a raftlock node serves the
	// gateway protocol itself, so raft's direct and gateway paths are the
	// same path.
	Direct = "direct"
	// Gateway is SDK → WebSocket gateway → backend: one gateway in the bench
	// process over one backend Locker, shared by every client, as one
	// gateway instance serves many clients.
	Gateway = "gateway"
)

// Vias lists the paths in report order.
var Vias = []string{Direct, Gateway}

// Direct returns a new backend Locker over the servers of s.
func (s *Servers) Direct(ctx context.Context, backend string) (lock.Locker, error) {
	return backends.Open(ctx, backend, backends.Spec(s.Spec), backends.Options{})
}

// Conn is a set of clients of one backend over one path.
type Conn struct {
	Backend, Via string
	// Cache: the clients are SDK clients with the lease cache on.
	Cache   bool
	Clients []lock.Locker

	newClient func() (lock.Locker, error)
	closers   []func() error
}

// Close closes the clients, then what serves them.
func (c *Conn) Close() error {
	errs := []error{c.closeClients()}
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	return errors.Join(errs...)
}

func (c *Conn) closeClients() error {
	var errs []error
	for _, l := range c.Clients {
		errs = append(errs, l.Close())
	}
	c.Clients = nil
	return errors.Join(errs...)
}

// Reopen closes the clients and opens as many new ones. Closing an SDK
// client with the lease cache on releases every lease its cache kept.
func (c *Conn) Reopen() error {
	n := len(c.Clients)
	if err := c.closeClients(); err != nil {
		return err
	}
	return c.open(n)
}

func (c *Conn) open(n int) error {
	for range n {
		l, err := c.newClient()
		if err != nil {
			return fmt.Errorf("bench: %s client: %w", c.Backend, err)
		}
		c.Clients = append(c.Clients, l)
	}
	return nil
}

// CacheStats totals the clients' lease cache counters (zero for clients
// without a cache).
func (c *Conn) CacheStats() client.CacheStats {
	var t client.CacheStats
	for _, l := range c.Clients {
		sdk, ok := l.(*client.Client)
		if !ok {
			continue
		}
		s := sdk.CacheStats()
		t.Hits += s.Hits
		t.Misses += s.Misses
		t.Kept += s.Kept
		t.Reclaimed += s.Reclaimed
		t.Idle += s.Idle
		t.Unused += s.Unused
	}
	return t
}

// ConnectOptions are the options of ConnectWith.
type ConnectOptions struct {
	// Cache connects SDK clients with the lease cache on
	// (client.Options.CacheLeases). Only the gateway path has SDK
	// clients to cache: with via direct it is an error.
	Cache bool
	// Propagator, for raft (whose clients are SDK clients on either
	// path), writes each request's trace context
	// (client.Options.Propagator); nil: the SDK's default.
	Propagator propagation.TextMapPropagator
}

// Connect returns n clients of backend over via. Each client is a Locker
// of its own (its own connections), as n separate processes would have.
func (s *Servers) Connect(ctx context.Context, backend, via string, n int) (*Conn, error) {
	return s.ConnectWith(ctx, backend, via, n, ConnectOptions{})
}

// ConnectWith is Connect with options.
func (s *Servers) ConnectWith(ctx context.Context, backend, via string, n int, o ConnectOptions) (*Conn, error) {
	if via != Direct && via != Gateway {
		return nil, fmt.Errorf("bench: unknown path %q (want direct or gateway)", via)
	}
	if o.Cache && via != Gateway {
		return nil, fmt.Errorf("bench: the lease cache is the SDK's: %s via %s has no SDK client to cache leases (use via gateway)", backend, via)
	}
	c := &Conn{Backend: backend, Via: via, Cache: o.Cache}
	c.newClient = func() (lock.Locker, error) { return s.Direct(ctx, backend) }
	sdk := client.Options{CacheLeases: o.Cache, Propagator: o.Propagator}
	switch {
	case via == Gateway && KindOf(backend) != backends.KindRaft:
		addr, closeGW, err := s.serveGateway(ctx, backend)
		if err != nil {
			return nil, err
		}
		c.closers = append(c.closers, closeGW)
		c.newClient = func() (lock.Locker, error) { return client.New([]string{addr}, sdk) }
	case o.Cache || o.Propagator != nil && KindOf(backend) == backends.KindRaft:
		// raftlock's nodes serve the gateway protocol: its direct Locker
		// is the SDK over them (internal/backends), here with the cache
		// or the propagator.
		c.newClient = func() (lock.Locker, error) { return client.New(s.Spec.Raft, sdk) }
	}
	if err := c.open(n); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// serveGateway serves a gateway over one backend Locker on a free loopback
// port and returns its address.
func (s *Servers) serveGateway(ctx context.Context, backend string) (string, func() error, error) {
	l, err := s.Direct(ctx, backend)
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		l.Close()
		return "", nil, err
	}
	g := gateway.New(l, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	// The product's connection limits, so that the bench measures the
	// server `lockgate serve` runs.
	srv := netguard.NewServer(g, netguard.Limits{}, nil)
	go srv.Serve(netguard.Listen(ln, netguard.Limits{}, nil))
	return ln.Addr().String(), func() error {
		g.Close()
		srv.Close()
		return l.Close()
	}, nil
}

// probeSeq numbers the feature probes, for keys of their own.
var probeSeq atomic.Int64

// NeedFeature returns an error matching lock.ErrUnsupported when conn's
// clients do not offer f. An SDK client learns the gateway's features only
// once connected, so a client that does not offer f is asked again after
// one plain acquire and release.
func NeedFeature(ctx context.Context, conn *Conn, f lock.Features) error {
	if len(conn.Clients) == 0 || f == 0 {
		return nil
	}
	l := conn.Clients[0]
	if lock.FeaturesOf(l).Has(f) {
		return nil
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	probe := fmt.Sprintf("bench/probe/%d/%d", time.Now().UnixNano(), probeSeq.Add(1))
	lease, err := l.Acquire(pctx, probe, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		return fmt.Errorf("bench: feature probe: %w", err)
	}
	if err := l.Release(pctx, lease); err != nil {
		return fmt.Errorf("bench: feature probe: %w", err)
	}
	if have := lock.FeaturesOf(l); !have.Has(f) {
		return kit.CheckSupported(conn.Backend+" via "+conn.Via, have, f, nil)
	}
	return nil
}
