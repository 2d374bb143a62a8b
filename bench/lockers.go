package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/backends"
	"github.com/lockgate/lockgate/internal/netguard"
	"github.com/lockgate/lockgate/lock"
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

// direct returns a new backend Locker over the servers of s.
func (s *Servers) direct(ctx context.Context, backend string) (lock.Locker, error) {
	return backends.Open(ctx, backend, backends.Spec(s.Spec), backends.Options{})
}

// Conn is a set of clients of one backend over one path.
type Conn struct {
	Backend, Via string
	Clients      []lock.Locker

	closers []func() error
}

// Close closes the clients, then what serves them.
func (c *Conn) Close() error {
	var errs []error
	for _, l := range c.Clients {
		errs = append(errs, l.Close())
	}
	for i := len(c.closers) - 1; i >= 0; i-- {
		errs = append(errs, c.closers[i]())
	}
	return errors.Join(errs...)
}

// Connect returns n clients of backend over via. Each client is a Locker
// of its own (its own connections), as n separate processes would have.
func (s *Servers) Connect(ctx context.Context, backend, via string, n int) (*Conn, error) {
	c := &Conn{Backend: backend, Via: via}
	newClient := func() (lock.Locker, error) { return s.direct(ctx, backend) }
	if via == Gateway && kindOf(backend) != backends.KindRaft {
		addr, closeGW, err := s.serveGateway(ctx, backend)
		if err != nil {
			return nil, err
		}
		c.closers = append(c.closers, closeGW)
		newClient = func() (lock.Locker, error) { return client.New([]string{addr}, client.Options{}) }
	} else if via != Direct && via != Gateway {
		return nil, fmt.Errorf("bench: unknown path %q (want direct or gateway)", via)
	}
	for range n {
		l, err := newClient()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("bench: %s client: %w", backend, err)
		}
		c.Clients = append(c.Clients, l)
	}
	return c, nil
}

// serveGateway serves a gateway over one backend Locker on a free loopback
// port and returns its address.
func (s *Servers) serveGateway(ctx context.Context, backend string) (string, func() error, error) {
	l, err := s.direct(ctx, backend)
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
