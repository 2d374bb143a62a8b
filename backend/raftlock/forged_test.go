package raftlock

import (
	"bytes"
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/fsm"
	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/lock"
)

// forgedTerm is the term a stranger claims: far above any real one, so
// that a node that believed it would never lead again without noticing.
const forgedTerm = 1 << 40

// logCapture is a node's log, kept for the test to search and also shown
// in t.Log; waitFor wakes on each line instead of polling.
type logCapture struct {
	t     testing.TB
	mu    sync.Mutex
	buf   bytes.Buffer
	wrote chan struct{}
}

func newLogCapture(t testing.TB) *logCapture {
	return &logCapture{t: t, wrote: make(chan struct{}, 1)}
}

func (c *logCapture) Write(p []byte) (int, error) {
	c.mu.Lock()
	c.buf.Write(p)
	c.mu.Unlock()
	select {
	case c.wrote <- struct{}{}:
	default:
	}
	return tLogWriter{c.t}.Write(p)
}

func (c *logCapture) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(c, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

func (c *logCapture) has(substr string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Contains(c.buf.String(), substr)
}

// waitFor waits until the log holds substr.
func (c *logCapture) waitFor(t testing.TB, substr string, within time.Duration) {
	t.Helper()
	deadline := time.After(within)
	for !c.has(substr) {
		select {
		case <-c.wrote:
		case <-deadline:
			t.Fatalf("no log line containing %q within %v", substr, within)
		}
	}
}

// strangerStream is the raft.StreamLayer of a party that is not a member:
// it dials over TLS with its own tls.Config (trusting the cluster's CA,
// so the server certificate is not what stops it).
type strangerStream struct {
	net.Listener
	tls *tls.Config
}

func (s *strangerStream) Dial(addr raft.ServerAddress, timeout time.Duration) (net.Conn, error) {
	c, err := net.DialTimeout("tcp", string(addr), timeout)
	if err != nil {
		return nil, err
	}
	tc := tls.Client(c, s.tls)
	tc.SetDeadline(time.Now().Add(timeout))
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, err
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}

// stranger is hashicorp/raft's own NetworkTransport over strangerStream:
// the RPCs it sends are encoded exactly as a member's would be.
func stranger(t testing.TB, cfg *tls.Config) *raft.NetworkTransport {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := raft.NewNetworkTransportWithConfig(&raft.NetworkTransportConfig{
		Stream: &strangerStream{Listener: ln, tls: cfg}, MaxPool: 1, Timeout: 5 * time.Second,
		Logger: hclog.NewNullLogger(),
	})
	t.Cleanup(func() { tr.Close() })
	return tr
}

// strangerConfigs are the TLS configurations of non-members: one presents
// no certificate, one a certificate from a CA the cluster does not trust.
func strangerConfigs(t testing.TB, ca *certfile.MemoryCA) map[string]*tls.Config {
	rogue, err := newCA(t, "rogue CA").Issue("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]*tls.Config{
		"no client certificate": {RootCAs: ca.Pool(), ServerName: "127.0.0.1"},
		"certificate from another CA": {RootCAs: ca.Pool(), ServerName: "127.0.0.1",
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &rogue, nil }},
	}
}

// forgedTarget is a one-node TLS cluster (the cluster CA verifies server
// certificates; no separate client CA is configured) holding two locks.
type forgedTarget struct {
	node   *Node
	log    *logCapture
	term   uint64
	tokens []lock.Token
}

func startForgedTarget(t *testing.T, ca *certfile.MemoryCA) *forgedTarget {
	t.Helper()
	logs := newLogCapture(t)
	c := startCluster(t, 1, func(cfg *Config) {
		cfg.TLS = nodeTLS(t, ca, false)
		cfg.Logger = logs.logger()
	})
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ft := &forgedTarget{node: l, log: logs}
	for _, key := range []string{"a", "b"} {
		lease, err := l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Hour, Owner: "member"})
		if err != nil {
			t.Fatal(err)
		}
		ft.tokens = append(ft.tokens, lease.Token)
	}
	ft.term = l.term()
	return ft
}

// requireUntouched checks that the forged RPC changed nothing: the term,
// both locks and the fencing counter are as before, a later grant's token
// is above every earlier one, and the refusal was logged.
func (ft *forgedTarget) requireUntouched(t *testing.T) {
	t.Helper()
	ft.log.waitFor(t, "raft peer refused", 10*time.Second)
	if got := ft.node.term(); got != ft.term {
		t.Fatalf("term went from %d to %d after a stranger's RPC", ft.term, got)
	}
	if n := ft.node.fsm.NumLocks(); n != 2 {
		t.Fatalf("%d locks after a stranger's RPC, want the 2 held", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, key := range []string{"a", "b"} {
		info, err := ft.node.Inspect(ctx, key)
		if err != nil || info == nil || info.Owner != "member" {
			t.Fatalf("lock %s after a stranger's RPC: %+v, %v; want held by member", key, info, err)
		}
	}
	lease, err := ft.node.Acquire(ctx, "c", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("grant after a stranger's RPC: %v", err)
	}
	for _, tok := range ft.tokens {
		if lease.Token <= tok {
			t.Fatalf("grant after a stranger's RPC has token %d, not above the earlier %d", lease.Token, tok)
		}
	}
}

func strangerHeader(tr *raft.NetworkTransport) raft.RPCHeader {
	return raft.RPCHeader{ProtocolVersion: raft.ProtocolVersionMax, ID: []byte("intruder"), Addr: []byte(tr.LocalAddr())}
}

// TestForgedAppendEntries: a heartbeat with term 2^40 from a party without
// a certificate of the cluster's CA is not processed (before peer
// authentication it was answered with success and the term jumped).
func TestForgedAppendEntries(t *testing.T) {
	ca := newCA(t, "cluster CA")
	for name, cfg := range strangerConfigs(t, ca) {
		t.Run(name, func(t *testing.T) {
			ft := startForgedTarget(t, ca)
			tr := stranger(t, cfg)
			req := &raft.AppendEntriesRequest{RPCHeader: strangerHeader(tr), Term: forgedTerm}
			var resp raft.AppendEntriesResponse
			err := tr.AppendEntries(raft.ServerID(ft.node.ID()), raft.ServerAddress(ft.node.RaftAddr()), req, &resp)
			if err == nil {
				t.Fatalf("a stranger's AppendEntries was answered: %+v", resp)
			}
			t.Logf("forged AppendEntries: %v", err)
			ft.requireUntouched(t)
		})
	}
}

// memSink is a raft.SnapshotSink into memory.
type memSink struct{ bytes.Buffer }

func (s *memSink) ID() string    { return "forged" }
func (s *memSink) Cancel() error { return nil }
func (s *memSink) Close() error  { return nil }

// TestForgedInstallSnapshot: an empty state installed by a stranger would
// wipe every lock and reset the fencing counter; it is not processed.
func TestForgedInstallSnapshot(t *testing.T) {
	ca := newCA(t, "cluster CA")
	empty, err := fsm.New().Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	var data memSink
	if err := empty.Persist(&data); err != nil {
		t.Fatal(err)
	}
	for name, cfg := range strangerConfigs(t, ca) {
		t.Run(name, func(t *testing.T) {
			ft := startForgedTarget(t, ca)
			tr := stranger(t, cfg)
			conf := raft.Configuration{Servers: []raft.Server{
				{Suffrage: raft.Voter, ID: raft.ServerID(ft.node.ID()), Address: raft.ServerAddress(ft.node.RaftAddr())},
				{Suffrage: raft.Voter, ID: "intruder", Address: tr.LocalAddr()},
			}}
			req := &raft.InstallSnapshotRequest{
				RPCHeader: strangerHeader(tr), SnapshotVersion: raft.SnapshotVersionMax,
				Term: forgedTerm, Leader: []byte(tr.LocalAddr()),
				LastLogIndex: 1 << 20, LastLogTerm: forgedTerm,
				Configuration: raft.EncodeConfiguration(conf), ConfigurationIndex: 1 << 20,
				Size: int64(data.Len()),
			}
			var resp raft.InstallSnapshotResponse
			err := tr.InstallSnapshot(raft.ServerID(ft.node.ID()), raft.ServerAddress(ft.node.RaftAddr()), req, &resp,
				io.NopCloser(bytes.NewReader(data.Bytes())))
			if err == nil && resp.Success {
				t.Fatalf("a stranger's InstallSnapshot succeeded: %+v", resp)
			}
			t.Logf("forged InstallSnapshot: %v, %+v", err, resp)
			if got := ft.node.Restores(); got != 0 {
				t.Fatalf("the node restored %d snapshots", got)
			}
			ft.requireUntouched(t)
		})
	}
}
