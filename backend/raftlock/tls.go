package raftlock

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/lockgate/lockgate/internal/certfile"
)

// TLS secures a node's traffic: the Raft transport (peer to peer), the API
// listener (clients and the membership RPCs) and the membership RPCs this
// node sends. With it, both listeners serve only TLS.
//
// Peers are always authenticated (mutual TLS, as Consul's verify_incoming):
// the Raft transport completes a handshake only with a party presenting a
// client certificate that verifies against ClientCAs (default RootCAs, the
// cluster CA), and the API accepts join and remove requests from such a
// party (or from an admin token, see Config.AdminTokens). Lock clients
// need no certificate; one that does not verify is refused at the
// handshake. Use a CA that signs only your nodes' certificates: anyone
// holding a certificate from it is a member.
type TLS struct {
	// Certificate is this node's certificate and key: presented by its
	// listeners, and as the client certificate when it dials peers (unless
	// Keys is set). Its SANs must cover the host of the node's RaftAddr
	// and APIAddr.
	Certificate tls.Certificate
	// RootCAs verifies the peers' (server) certificates: the cluster CA.
	// Nil: the system's roots, and then ClientCAs is required (public
	// roots would admit anyone holding a public certificate as a peer).
	RootCAs *x509.CertPool
	// ClientCAs verifies the peers' client certificates. Nil: RootCAs.
	ClientCAs *x509.CertPool

	// Keys, if not nil, serves the certificate instead of Certificate,
	// and picks up a rotated pair without a restart (certfile.Load; set
	// its OnReload to log rotations). Nil: the fixed Certificate.
	Keys *certfile.Keypair
}

// withCert sets c's certificate: the reloadable pair if there is one.
func (t *TLS) withCert(c *tls.Config, client bool) *tls.Config {
	switch {
	case t.Keys != nil && client:
		c.GetClientCertificate = t.Keys.GetClientCertificate
	case t.Keys != nil:
		c.GetCertificate = t.Keys.GetCertificate
	default:
		c.Certificates = []tls.Certificate{t.Certificate}
	}
	return c
}

// ErrNoPeerCA: a TLS without a CA to verify peers' client certificates.
var ErrNoPeerCA = errors.New("raftlock: TLS has no CA to verify peers' client certificates: " +
	"set TLS.RootCAs (--tls-ca, the CA that signed the nodes' certificates) or TLS.ClientCAs (--tls-client-ca); " +
	"the system's public roots would admit anyone holding a public certificate as a peer")

// clientCAs verifies peers' client certificates: ClientCAs, else RootCAs.
func (t *TLS) clientCAs() *x509.CertPool {
	if t.ClientCAs != nil {
		return t.ClientCAs
	}
	return t.RootCAs
}

// validate reports a TLS that cannot authenticate peers.
func (t *TLS) validate() error {
	if t != nil && t.clientCAs() == nil {
		return ErrNoPeerCA
	}
	return nil
}

// PeerAuth reports whether peers must present certificates: always, with
// a valid TLS (validate).
func (t *TLS) PeerAuth() bool { return t != nil && t.clientCAs() != nil }

// raftServerConfig is the Raft listener's: a peer without a verified
// certificate cannot complete the handshake.
func (t *TLS) raftServerConfig() *tls.Config { return t.serverConfig(tls.RequireAndVerifyClientCert) }

// APIServerConfig is the API listener's: lock clients present no
// certificate, so one is verified only if given; the membership handlers
// then accept a verified one as a member's credential (see TLS).
func (t *TLS) APIServerConfig() *tls.Config { return t.serverConfig(tls.VerifyClientCertIfGiven) }

// serverConfig serves this node's certificate and checks client
// certificates against clientCAs as auth says.
func (t *TLS) serverConfig(auth tls.ClientAuthType) *tls.Config {
	c := t.withCert(&tls.Config{MinVersion: tls.VersionTLS12}, false)
	if cas := t.clientCAs(); cas != nil {
		c.ClientCAs = cas
		c.ClientAuth = auth
	} else if auth == tls.RequireAndVerifyClientCert {
		// Unreachable after validate; never fall back to no peer
		// authentication: a certificate cannot verify against no pool.
		c.ClientCAs = x509.NewCertPool()
		c.ClientAuth = auth
	}
	return c
}

// ClientConfig is what this node dials peers with: their certificates
// verified against RootCAs, its own certificate presented.
func (t *TLS) ClientConfig() *tls.Config {
	return t.withCert(&tls.Config{RootCAs: t.RootCAs, MinVersion: tls.VersionTLS12}, true)
}

// peerVerified reports whether r came with a client certificate that
// verified against ClientCAs (the handshake checked it).
func peerVerified(r *http.Request) bool {
	return r.TLS != nil && len(r.TLS.VerifiedChains) > 0
}

// tlsDial completes a TLS handshake over c within timeout, verifying the
// peer as serverAddr (its Raft address: the one in the cluster
// configuration, not the proxy it may be dialled through).
func tlsDial(c net.Conn, cfg *tls.Config, serverAddr string, timeout time.Duration) (net.Conn, error) {
	cfg = cfg.Clone()
	if host, _, err := net.SplitHostPort(serverAddr); err == nil {
		cfg.ServerName = host
	}
	tc := tls.Client(c, cfg)
	if timeout > 0 {
		tc.SetDeadline(time.Now().Add(timeout))
	}
	if err := tc.Handshake(); err != nil {
		c.Close()
		return nil, fmt.Errorf("raftlock: TLS handshake with %s: %w", serverAddr, err)
	}
	tc.SetDeadline(time.Time{})
	return tc, nil
}
