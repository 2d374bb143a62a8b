package raftlock

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/certfile"
)

// TestPeerAuthRequired: a node without TLS refuses a Raft address others
// can reach unless InsecureNoPeerAuth says so, and says which settings to
// add; the check comes before the wildcard-bind one. A TLS with no CA to
// verify peers is refused too.
func TestPeerAuthRequired(t *testing.T) {
	ca := newCA(t, "cluster CA")
	base := func(raftAddr, advertise string) Config {
		c := DefaultConfig("1")
		c.DataDir, c.RaftAddr, c.RaftAdvertise = t.TempDir(), raftAddr, advertise
		return c
	}
	for _, tc := range []struct {
		name string
		cfg  func() Config
		want error
	}{
		{"loopback", func() Config { return base("127.0.0.1:8081", "") }, nil},
		{"localhost", func() Config { return base("localhost:8081", "") }, nil},
		{"wildcard", func() Config { return base("0.0.0.0:8081", "") }, ErrNoPeerAuth},
		{"wildcard advertised", func() Config { return base("0.0.0.0:8081", "raft1:8081") }, ErrNoPeerAuth},
		{"loopback advertised elsewhere", func() Config { return base("127.0.0.1:8081", "10.0.0.1:8081") }, ErrNoPeerAuth},
		{"private address", func() Config { return base("10.0.0.1:8081", "") }, ErrNoPeerAuth},
		{"insecure flag", func() Config {
			c := base("0.0.0.0:8081", "raft1:8081")
			c.InsecureNoPeerAuth = true
			return c
		}, nil},
		{"TLS", func() Config {
			c := base("0.0.0.0:8081", "raft1:8081")
			c.TLS = nodeTLS(t, ca, false)
			return c
		}, nil},
		{"TLS without a CA", func() Config {
			c := base("0.0.0.0:8081", "raft1:8081")
			c.TLS = &TLS{Certificate: nodeTLS(t, ca, false).Certificate}
			return c
		}, ErrNoPeerCA},
	} {
		cfg := tc.cfg()
		err := cfg.Validate()
		if !errors.Is(err, tc.want) || (tc.want == nil) != (err == nil) {
			t.Errorf("%s: Validate() = %v, want %v", tc.name, err, tc.want)
			continue
		}
		if errors.Is(err, ErrNoPeerAuth) {
			for _, flag := range []string{"--insecure-raft-no-peer-auth", "--tls-cert", "--tls-ca"} {
				if !strings.Contains(err.Error(), flag) {
					t.Errorf("%s: %q does not name %s", tc.name, err, flag)
				}
			}
		}
	}
	// A TLS serving reloadable files (what `lockgate node --tls-cert`
	// builds) without a CA is refused by New and StartServer too, on
	// loopback as well, before the data directory is made.
	dir := t.TempDir()
	certPEM, keyPEM, err := ca.IssuePEM("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	for f, b := range map[string][]byte{certFile: certPEM, keyFile: keyPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	keys, err := certfile.Load(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg := base("127.0.0.1:0", "")
	cfg.APIAddr = "127.0.0.1:0"
	cfg.DataDir = filepath.Join(dir, "data")
	cfg.TLS = &TLS{Keys: keys}
	if n, err := New(cfg); !errors.Is(err, ErrNoPeerCA) {
		if n != nil {
			n.Shutdown()
		}
		t.Errorf("New with a file-backed TLS and no CA: %v, want ErrNoPeerCA", err)
	}
	if s, err := StartServer(context.Background(), cfg, nil); !errors.Is(err, ErrNoPeerCA) {
		if s != nil {
			s.Shutdown()
		}
		t.Errorf("StartServer with a file-backed TLS and no CA: %v, want ErrNoPeerCA", err)
	}
	if _, err := os.Stat(cfg.DataDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the refused node made its data dir: %v", err)
	}
}

// TestForgedSlowHandshake: a stranger that connects to the Raft port and
// sends nothing is disconnected after the handshake timeout, and a peer
// connecting meanwhile is accepted at once (handshakes run off the Accept
// loop).
func TestForgedSlowHandshake(t *testing.T) {
	ca := newCA(t, "cluster CA")
	nt := nodeTLS(t, ca, false)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logs := newLogCapture(t)
	ln := newPeerListener(tcp, nt.raftServerConfig(), logs.logger(), 300*time.Millisecond)
	defer ln.Close()

	silent, err := net.Dial("tcp", tcp.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Close()

	if err := memberAccepted(ln, tcp.Addr().String(), nt.ClientConfig(), 5*time.Second); err != nil {
		t.Fatalf("while a silent stranger was handshaking: %v", err)
	}

	silent.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadAll(silent); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatal("the Raft listener kept a silent connection open")
		}
	}
	logs.waitFor(t, "raft peer refused", 5*time.Second)
}

// TestForgedRefusalLogBounded: refusals are logged once per remote host
// per window and at most MaxPeerRefusalLogs times in all.
func TestForgedRefusalLogBounded(t *testing.T) {
	logs := newLogCapture(t)
	r := &refusalLog{log: slog.New(slog.NewTextHandler(logs, nil))}
	for i := 0; i < 5; i++ {
		r.refuse(&net.TCPAddr{IP: net.IPv4(10, 0, 0, 1), Port: 1000 + i}, errors.New("bad certificate"))
	}
	for i := 0; i < 3*MaxPeerRefusalLogs; i++ {
		r.refuse(&net.TCPAddr{IP: net.IPv4(10, 1, byte(i>>8), byte(i)), Port: 1}, errors.New("bad certificate"))
	}
	logs.mu.Lock()
	lines := strings.Count(logs.buf.String(), "raft peer refused")
	logs.mu.Unlock()
	if lines != MaxPeerRefusalLogs {
		t.Fatalf("%d lines logged for %d refusals, want %d", lines, 5+3*MaxPeerRefusalLogs, MaxPeerRefusalLogs)
	}
}

// flakyListener fails its first Accept calls with a transient error, as a
// listener does when a connection flood has used up the descriptors.
type flakyListener struct {
	net.Listener
	fails atomic.Int32
}

func (l *flakyListener) Accept() (net.Conn, error) {
	if l.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: syscall.EMFILE}
	}
	return l.Listener.Accept()
}

// TestForgedFloodAcceptRetried: a failed accept (EMFILE) does not close
// the Raft listener for good; it accepts the next member once the error
// passes.
func TestForgedFloodAcceptRetried(t *testing.T) {
	ca := newCA(t, "cluster CA")
	nt := nodeTLS(t, ca, false)
	tcp, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	flaky := &flakyListener{Listener: tcp}
	flaky.fails.Store(3)
	logs := newLogCapture(t)
	ln := newPeerListener(flaky, nt.raftServerConfig(), logs.logger(), 5*time.Second)
	defer ln.Close()
	if err := memberAccepted(ln, tcp.Addr().String(), nt.ClientConfig(), 30*time.Second); err != nil {
		t.Fatalf("after transient accept errors: %v", err)
	}
	logs.waitFor(t, "accept failed; retrying", 5*time.Second)
}

// memberAccepted dials addr as a member (cfg) and reports whether ln's
// Accept returns the connection within the given time.
func memberAccepted(ln net.Listener, addr string, cfg *tls.Config, within time.Duration) error {
	accepted := make(chan error, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			c.Close()
		}
		accepted <- err
	}()
	peer, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		return fmt.Errorf("a member's dial: %w", err)
	}
	defer peer.Close()
	peer.Write([]byte{0}) // TLS 1.3: the server reads the client's certificate with the first record
	select {
	case err := <-accepted:
		if err != nil {
			return fmt.Errorf("Accept: %w", err)
		}
		return nil
	case <-time.After(within):
		return fmt.Errorf("a member was not accepted within %v", within)
	}
}
