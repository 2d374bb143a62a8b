package raftlock

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"sync"
	"time"
)

// Limits of the Raft listener's peer authentication.
const (
	// PeerHandshakeTimeout bounds a TLS handshake on the Raft port: a
	// party that neither completes nor abandons one is disconnected then,
	// so strangers cannot hold connections open there.
	PeerHandshakeTimeout = 10 * time.Second
	// MaxPendingPeerHandshakes bounds the handshakes in progress on the
	// Raft port; a connection beyond it is closed at once (members retry
	// their dials, and a handful of peers never need this many).
	MaxPendingPeerHandshakes = 128
	// MaxPeerRefusalLogs bounds the Warn lines about refused peers per
	// PeerRefusalLogWindow (one per remote host in a window at most), so
	// that a stranger cannot flood the log; the rest are counted and the
	// count reported with the next window's first line.
	MaxPeerRefusalLogs   = 20
	PeerRefusalLogWindow = time.Minute
)

// errListenerClosed is Accept's answer once the listener is closed.
var errListenerClosed = errors.New("raftlock: raft listener closed")

// peerListener is the Raft transport's TLS listener. Each accepted
// connection's handshake runs in its own goroutine, off the Accept loop,
// so that one slow stranger cannot delay the peers behind it; only a
// connection whose client certificate verified against the cluster CA
// (tls.RequireAndVerifyClientCert) reaches Accept. The others are closed
// and logged (bounded, see refusalLog).
type peerListener struct {
	net.Listener // the TCP listener
	cfg          *tls.Config
	refusals     *refusalLog
	timeout      time.Duration // of one handshake

	ready   chan net.Conn
	pending chan struct{}   // semaphore of handshakes in progress
	ctx     context.Context // cancelled by Close: abandons the handshakes
	cancel  context.CancelFunc
	once    sync.Once
}

// newPeerListener admits verified peers from ln; each handshake may take
// up to timeout (PeerHandshakeTimeout in production).
func newPeerListener(ln net.Listener, cfg *tls.Config, log *slog.Logger, timeout time.Duration) *peerListener {
	l := &peerListener{
		Listener: ln,
		cfg:      cfg,
		refusals: &refusalLog{log: log},
		timeout:  timeout,
		ready:    make(chan net.Conn),
		pending:  make(chan struct{}, MaxPendingPeerHandshakes),
	}
	if log == nil {
		l.refusals.log = slog.Default()
	}
	l.ctx, l.cancel = context.WithCancel(context.Background())
	go l.acceptLoop()
	return l
}

func (l *peerListener) acceptLoop() {
	var backoff time.Duration
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) || l.ctx.Err() != nil {
				l.Close()
				return
			}
			// Anything else is transient (EMFILE when a flood of
			// connections exhausts the descriptors, ECONNABORTED): wait
			// and accept again, as net/http's Serve does, rather than
			// leave the node deaf to its peers for good.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			l.refusals.log.Warn("raft listener: accept failed; retrying", "err", err, "retry_in", backoff)
			select {
			case <-time.After(backoff):
			case <-l.ctx.Done():
			}
			continue
		}
		backoff = 0
		select {
		case l.pending <- struct{}{}:
			go l.handshake(c)
		default:
			l.refusals.refuse(c.RemoteAddr(), errors.New("too many handshakes in progress"))
			c.Close()
		}
	}
}

// handshake admits c if it completes a handshake with a verified client
// certificate within PeerHandshakeTimeout.
func (l *peerListener) handshake(c net.Conn) {
	defer func() { <-l.pending }()
	tc := tls.Server(c, l.cfg)
	// The context's end closes c and so interrupts the handshake.
	ctx, cancel := context.WithTimeout(l.ctx, l.timeout)
	defer cancel()
	err := tc.HandshakeContext(ctx)
	if err == nil && len(tc.ConnectionState().VerifiedChains) == 0 {
		err = errors.New("no verified client certificate") // RequireAndVerifyClientCert makes this unreachable
	}
	if err != nil {
		if l.ctx.Err() == nil { // not a shutdown
			l.refusals.refuse(c.RemoteAddr(), err)
		}
		c.Close()
		return
	}
	select {
	case l.ready <- tc:
	case <-l.ctx.Done():
		tc.Close()
	}
}

// Accept returns the next verified peer connection.
func (l *peerListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ready:
		return c, nil
	case <-l.ctx.Done():
		return nil, errListenerClosed
	}
}

// Close stops accepting and abandons the handshakes in progress.
func (l *peerListener) Close() error {
	var err error
	l.once.Do(func() {
		l.cancel()
		err = l.Listener.Close()
	})
	return err
}

// refusalLog logs refused peers at Warn: at most one line per remote host
// and MaxPeerRefusalLogs lines in each PeerRefusalLogWindow.
type refusalLog struct {
	log *slog.Logger

	mu         sync.Mutex
	window     time.Time
	logged     map[string]bool // hosts logged in this window
	suppressed int             // refusals not logged since the last line
}

func (r *refusalLog) refuse(remote net.Addr, err error) {
	host := remote.String()
	if h, _, e := net.SplitHostPort(host); e == nil {
		host = h
	}
	now := time.Now()
	r.mu.Lock()
	if now.Sub(r.window) >= PeerRefusalLogWindow {
		r.window, r.logged = now, map[string]bool{}
	}
	if r.logged[host] || len(r.logged) >= MaxPeerRefusalLogs {
		r.suppressed++
		r.mu.Unlock()
		return
	}
	r.logged[host] = true
	suppressed := r.suppressed
	r.suppressed = 0
	r.mu.Unlock()
	r.log.Warn("raft peer refused: peers must present a certificate from the cluster CA; connection closed",
		"remote", remote.String(), "err", err, "refusals_not_logged", suppressed)
}
