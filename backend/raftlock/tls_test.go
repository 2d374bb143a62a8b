package raftlock

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/lock"
)

func newCA(t testing.TB, name string) *certfile.MemoryCA {
	t.Helper()
	ca, err := certfile.NewMemoryCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// nodeTLS is a TLS for a node on loopback with a certificate from ca,
// which it also trusts for peers' server certificates and, with peerAuth,
// for their client certificates.
func nodeTLS(t testing.TB, ca *certfile.MemoryCA, peerAuth bool) *TLS {
	t.Helper()
	cert, err := ca.Issue("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	nt := &TLS{Certificate: cert, RootCAs: ca.Pool()}
	if peerAuth {
		nt.ClientCAs = ca.Pool()
	}
	return nt
}

// TestTLSCluster: three nodes with mutual TLS on the Raft transport and the
// API elect a leader and commit; plaintext clients are refused by the API;
// nodes whose certificates the cluster does not trust cannot join, and the
// configuration never lists them.
func TestTLSCluster(t *testing.T) {
	ca := newCA(t, "cluster CA")
	c := startCluster(t, 3, func(cfg *Config) { cfg.TLS = nodeTLS(t, ca, true) })
	l := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := l.Acquire(ctx, "tls", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("acquire over a TLS cluster: %v", err)
	}
	if err := l.Release(ctx, lease); err != nil {
		t.Fatalf("release: %v", err)
	}
	// Every node took part: the configuration lists three voters, and
	// the commit needed a follower's vote over the TLS transport.
	members := &MembershipClient{TLS: nodeTLS(t, ca, false).ClientConfig()}
	pl, err := members.FetchPeers(ctx, followers(c, l)[0].APIAddr())
	if err != nil {
		t.Fatalf("peers over https: %v", err)
	}
	if len(pl.Voters) != 3 || pl.LeaderID != l.ID() {
		t.Fatalf("peers = %+v, want 3 voters led by %s", pl, l.ID())
	}

	t.Run("plaintext API refused", func(t *testing.T) {
		resp, err := http.Get("http://" + l.APIAddr() + PathPeers)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Fatalf("plaintext GET answered %s, want a refusal", resp.Status)
			}
		}
		if _, err := FetchPeers(ctx, l.APIAddr()); err == nil {
			t.Fatal("plain-HTTP FetchPeers of a TLS node succeeded")
		}
	})

	t.Run("plaintext raft refused", func(t *testing.T) {
		fs, err := newFaultStream("127.0.0.1:0", nil, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer fs.Close()
		conn, err := fs.Dial(raft.ServerAddress(l.RaftAddr()), 2*time.Second)
		if err != nil {
			return // refused outright: fine
		}
		defer conn.Close()
		conn.SetDeadline(time.Now().Add(5 * time.Second))
		conn.Write(bytes.Repeat([]byte{0}, 64)) // not a TLS record
		// The server closes the connection, at most after a TLS alert
		// record (content type 21); a read that times out would mean it
		// is waiting for more, as if the bytes had been accepted.
		got, err := io.ReadAll(conn)
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			t.Fatalf("the TLS raft listener kept a plaintext connection open (read %x)", got)
		}
		if len(got) > 0 && got[0] != 21 {
			t.Fatalf("a plaintext raft connection got an answer that is not a TLS alert: %x", got)
		}
	})

	t.Run("untrusted certificate cannot join", func(t *testing.T) {
		rogue := newCA(t, "rogue CA")
		cert, err := rogue.Issue("127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		cfg := DefaultConfig("4")
		fastConfig(t)(&cfg)
		cfg.DataDir = t.TempDir()
		// It trusts the cluster (so the failure is the cluster refusing it,
		// not it refusing the cluster) but presents a rogue certificate.
		cfg.TLS = &TLS{Certificate: cert, RootCAs: ca.Pool(), ClientCAs: rogue.Pool()}
		jctx, jcancel := context.WithTimeout(ctx, 3*time.Second)
		defer jcancel()
		s4, err := StartServer(jctx, cfg, []string{followers(c, l)[0].APIAddr(), l.APIAddr()})
		if err == nil {
			s4.Shutdown()
			t.Fatal("a node with an untrusted certificate joined")
		}
		t.Logf("join refused: %v", err)
		requireNotMember(t, l, "4")

		// Go's client leaves out a certificate the server's CA list does
		// not cover (so the join above was refused for lacking one); one
		// presented anyway fails the handshake.
		forced := &MembershipClient{TLS: &tls.Config{RootCAs: ca.Pool(),
			GetClientCertificate: func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &cert, nil }}}
		if _, err := forced.Join(ctx, []string{l.APIAddr()}, JoinArgs{ServerID: "4", ServerAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"}); err == nil {
			t.Fatal("a join presenting an untrusted certificate succeeded")
		} else if !strings.Contains(err.Error(), "certificate") {
			t.Fatalf("join presenting an untrusted certificate: %v; want a TLS certificate error", err)
		}
		requireNotMember(t, l, "4")
	})

	t.Run("no client certificate cannot join", func(t *testing.T) {
		// A lock client's TLS (trusts the cluster, presents nothing) may
		// use the API but not change the membership.
		mc := &MembershipClient{TLS: &tls.Config{RootCAs: ca.Pool()}}
		rep, err := mc.Join(ctx, []string{l.APIAddr()}, JoinArgs{ServerID: "5", ServerAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"})
		if err == nil {
			t.Fatalf("join without a client certificate succeeded: %+v", rep)
		}
		if rep == nil || !strings.Contains(rep.Error, "client certificate") {
			t.Fatalf("join without a certificate: %+v, %v; want a 403 naming the client certificate", rep, err)
		}
		requireNotMember(t, l, "5")
	})
}

func requireNotMember(t *testing.T, l *Node, id string) {
	t.Helper()
	f := l.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) }) {
		t.Fatalf("node %s is in the configuration: %+v", id, f.Configuration().Servers)
	}
}

// TestTLSRotation: a node loaded from certificate files serves a rotated
// certificate on its API and Raft listeners without a restart.
func TestTLSRotation(t *testing.T) {
	ca := newCA(t, "cluster CA")
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "node.crt"), filepath.Join(dir, "node.key")
	write := func() *big.Int {
		c, k, err := ca.IssuePEM("127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		for f, b := range map[string][]byte{certFile: c, keyFile: k} {
			if err := os.WriteFile(f+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f+".new", f); err != nil {
				t.Fatal(err)
			}
		}
		blk, _ := pem.Decode(c)
		x, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		return x.SerialNumber
	}
	first := write()
	caFile := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ca.Cert.Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	keys, err := certfile.Load(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	keys.CheckInterval = 0
	pool, err := certfile.LoadPool(caFile)
	if err != nil {
		t.Fatal(err)
	}
	// Certificate is left empty: the node must serve Keys' pair.
	nt := &TLS{Keys: keys, RootCAs: pool, ClientCAs: pool}
	c := startCluster(t, 1, func(cfg *Config) { cfg.TLS = nt })
	l := leader(t, c)
	client := nodeTLS(t, ca, true).ClientConfig() // a peer: mTLS on the Raft listener
	serial := func(addr string) *big.Int {
		t.Helper()
		conn, err := tls.Dial("tcp", addr, client)
		if err != nil {
			t.Fatalf("TLS dial %s: %v", addr, err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].SerialNumber
	}
	for _, addr := range []string{l.APIAddr(), l.RaftAddr()} {
		if got := serial(addr); got.Cmp(first) != 0 {
			t.Fatalf("%s serves serial %v, want the loaded %v", addr, got, first)
		}
	}
	second := write()
	for _, addr := range []string{l.APIAddr(), l.RaftAddr()} {
		if got := serial(addr); got.Cmp(second) != 0 {
			t.Errorf("%s serves serial %v after rotation, want the new %v", addr, got, second)
		}
	}
}
