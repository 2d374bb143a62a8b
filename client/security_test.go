package client_test

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

const testToken = "client-test-token-0123456789"

func testCA(t testing.TB) *certfile.MemoryCA {
	t.Helper()
	ca, err := certfile.NewMemoryCA("client test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// startSecureGateway serves a gateway over TLS with bearer tokens.
func startSecureGateway(t testing.TB, ca *certfile.MemoryCA) string {
	t.Helper()
	cert, err := ca.Issue("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	toks, err := gateway.NewTokens(testToken)
	if err != nil {
		t.Fatal(err)
	}
	l := locktest.NewMemStore().NewLocker()
	g := gateway.New(l, gateway.Options{Logger: slog.New(slog.DiscardHandler), Tokens: toks})
	srv := httptest.NewUnstartedServer(g)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(func() { g.Close(); srv.Close(); l.Close() })
	return strings.TrimPrefix(srv.URL, "https://")
}

// TestTLSAndToken: the SDK with the CA and the token acquires and releases
// through a TLS gateway; a plaintext client, a client that does not trust
// the CA, and a client with a wrong or no token are refused.
func TestTLSAndToken(t *testing.T) {
	t.Parallel()
	ca := testCA(t)
	addr := startSecureGateway(t, ca)
	tlsCfg := &tls.Config{RootCAs: ca.Pool()}

	for _, ep := range []string{addr, "wss://" + addr, "https://" + addr + "/"} {
		c := newClient(t, []string{ep}, client.Options{TLSConfig: tlsCfg, Token: testToken})
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		lease, err := c.TryAcquire(ctx, "secure", lock.AcquireOptions{TTL: 5 * time.Second})
		if err != nil {
			cancel()
			t.Fatalf("%s: acquire over TLS with the token: %v", ep, err)
		}
		if err := c.Release(ctx, lease); err != nil {
			t.Fatalf("%s: release: %v", ep, err)
		}
		cancel()
	}

	refused := map[string]client.Options{
		"plaintext":   {Token: testToken},
		"untrusted":   {TLSConfig: &tls.Config{}, Token: testToken},
		"wrong token": {TLSConfig: tlsCfg, Token: "not-the-token-0123456789"},
		"no token":    {TLSConfig: tlsCfg},
	}
	for name, opts := range refused {
		opts.DialTimeout = time.Second
		c := newClient(t, []string{addr}, opts)
		ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
		_, err := c.TryAcquire(ctx, "secure", lock.AcquireOptions{TTL: 5 * time.Second})
		cancel()
		if err == nil {
			t.Fatalf("%s client acquired", name)
		}
		if strings.Contains(name, "token") != errors.Is(err, client.ErrUnauthorized) {
			t.Fatalf("%s client: %v; ErrUnauthorized must match exactly the token failures", name, err)
		}
		t.Logf("%s: %v", name, err)
	}

	if _, err := client.New([]string{"wss://" + addr, "http://" + addr}, client.Options{}); err == nil {
		t.Fatal("client.New accepted a mix of TLS and plaintext endpoints")
	}
}

// TestTLSRaftRedirect: over a raftlock cluster whose nodes serve only TLS
// (with mutual TLS between them) and require a token, a client given only
// a follower's address is redirected to the leader over wss:// and holds
// a lock.
func TestTLSRaftRedirect(t *testing.T) {
	t.Parallel()
	ca := testCA(t)
	toks, err := gateway.NewTokens(testToken)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.Logger = slog.New(slog.DiscardHandler)
		cert, err := ca.Issue("127.0.0.1", "localhost")
		if err != nil {
			t.Error(err)
		}
		cfg.TLS = &raftlock.TLS{Certificate: cert, RootCAs: ca.Pool(), ClientCAs: ca.Pool()}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	for _, s := range c.Servers {
		g := raftgw.Serve(s, gateway.Options{Logger: slog.New(slog.DiscardHandler), Tokens: toks})
		t.Cleanup(func() { g.Close() })
	}
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower string
	for _, n := range c.Nodes() {
		if n != l {
			follower = n.APIAddr()
			break
		}
	}
	cl := newClient(t, []string{follower}, client.Options{TLSConfig: &tls.Config{RootCAs: ca.Pool()}, Token: testToken})
	lease, err := cl.Acquire(ctx, "redirected", lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire through a TLS follower: %v", err)
	}
	if got := cl.Endpoint(); got != l.APIAddr() {
		t.Errorf("connected to %s, want the leader %s", got, l.APIAddr())
	}
	if err := cl.Release(ctx, lease); err != nil {
		t.Fatalf("release: %v", err)
	}
}
