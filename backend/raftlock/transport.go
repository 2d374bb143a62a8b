package raftlock

import (
	"crypto/tls"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/hashicorp/raft"
)

// faultStream is the TCP (or TLS) stream layer of the Raft transport, with a switch
// to cut this node off from chosen peers (tests and the chaos bench inject
// partitions through it; it is inert otherwise). Raft's NetworkTransport
// sends each RPC over a connection dialled by the caller, so refusing
// outbound dials (and closing the outbound connections already open) in
// both directions severs two nodes completely.
type faultStream struct {
	net.Listener // with TLS, a peerListener: only verified peers come out of Accept
	advertise    net.Addr
	via          map[string]string // peer address → address to dial (Config.PeerDial)
	tls          *tls.Config       // dial config; nil: plain TCP

	mu      sync.Mutex
	blocked map[raft.ServerAddress]bool
	conns   map[net.Conn]raft.ServerAddress // open outbound connections
}

// newFaultStream listens on bind; with t, it serves and dials only TLS and
// admits only peers with a verified certificate, logging refusals to log.
func newFaultStream(bind string, via map[string]string, t *TLS, log *slog.Logger) (*faultStream, error) {
	ln, err := net.Listen("tcp", bind)
	if err != nil {
		return nil, fmt.Errorf("raftlock: raft transport listen on %s: %w", bind, err)
	}
	advertise := ln.Addr()
	var dial *tls.Config
	if t != nil {
		ln = newPeerListener(ln, t.raftServerConfig(), log, PeerHandshakeTimeout)
		dial = t.ClientConfig()
	}
	return &faultStream{
		Listener:  ln,
		advertise: advertise,
		via:       via,
		tls:       dial,
		blocked:   make(map[raft.ServerAddress]bool),
		conns:     make(map[net.Conn]raft.ServerAddress),
	}, nil
}

// advertiseAddr is Config.RaftAdvertise as a net.Addr: raft uses its
// String() as this node's address, and peers dial it by name.
type advertiseAddr string

func (a advertiseAddr) Network() string { return "tcp" }
func (a advertiseAddr) String() string  { return string(a) }

// Addr is the address peers dial.
func (s *faultStream) Addr() net.Addr { return s.advertise }

// Dial implements raft.StreamLayer.
func (s *faultStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	s.mu.Lock()
	blocked := s.blocked[addr]
	s.mu.Unlock()
	if blocked {
		return nil, fmt.Errorf("dial %s: %w", addr, errPartitioned)
	}
	dial := string(addr)
	if v, ok := s.via[dial]; ok {
		dial = v
	}
	start := time.Now()
	c, err := net.DialTimeout("tcp", dial, timeout)
	if err != nil {
		return nil, err
	}
	if s.tls != nil {
		if c, err = tlsDial(c, s.tls, string(addr), timeout-time.Since(start)); err != nil {
			return nil, err
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.blocked[addr] { // cut while dialling
		c.Close()
		return nil, fmt.Errorf("dial %s: %w", addr, errPartitioned)
	}
	tc := &trackedConn{Conn: c, s: s}
	s.conns[tc] = addr
	return tc, nil
}

// block cuts outbound traffic to the peers at addrs (or heals it).
func (s *faultStream) block(cut bool, addrs ...raft.ServerAddress) {
	var doomed []net.Conn
	s.mu.Lock()
	for _, a := range addrs {
		if !cut {
			delete(s.blocked, a)
			continue
		}
		s.blocked[a] = true
		for c, to := range s.conns {
			if to == a {
				doomed = append(doomed, c)
			}
		}
	}
	s.mu.Unlock()
	for _, c := range doomed { // Close takes s.mu to untrack itself
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	s    *faultStream
	once sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() {
		c.s.mu.Lock()
		delete(c.s.conns, c)
		c.s.mu.Unlock()
	})
	return c.Conn.Close()
}
