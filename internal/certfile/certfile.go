// Package certfile serves a TLS certificate and key from PEM files and
// picks up new files without a restart: certificates are rotated long
// before they expire (cert-manager, ACME, a cron job), and a lock service
// that must be restarted to see the new one turns every rotation into a
// leader election.
//
// A Keypair re-reads its files when their size or modification time
// changed, checked at most once per CheckInterval, at a TLS handshake. A
// pair that fails to load (half-written, key not matching) leaves the
// previous one in service and is retried at the next check; Err reports it.
//
// LoadPool reads a CA bundle; MemoryCA is a certificate authority held in
// memory, for `lockgate serve`'s embedded cluster and for tests.
package certfile

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"sync"
	"time"
)

// DefaultCheckInterval is how often, at most, the files are looked at.
const DefaultCheckInterval = 10 * time.Second

// Keypair is a certificate and private key loaded from PEM files.
type Keypair struct {
	certFile, keyFile string
	// CheckInterval bounds how often the files are stat'ed (0: at every
	// handshake). Set it before use.
	CheckInterval time.Duration
	// OnReload, if not nil, is called after every reload attempt that
	// found changed files, with its outcome (nil: the new pair serves).
	OnReload func(error)

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp
	checked time.Time
	err     error
}

type fileStamp struct {
	size int64
	mod  time.Time
}

// Load reads certFile and keyFile; it fails if they do not hold a matching
// certificate and key.
func Load(certFile, keyFile string) (*Keypair, error) {
	k := &Keypair{certFile: certFile, keyFile: keyFile, CheckInterval: DefaultCheckInterval}
	stamp, err := k.stat()
	if err != nil {
		return nil, err
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, fmt.Errorf("TLS certificate %s / key %s: %w", certFile, keyFile, err)
	}
	k.cert, k.stamp, k.checked = &cert, stamp, time.Now()
	return k, nil
}

func (k *Keypair) stat() ([2]fileStamp, error) {
	var s [2]fileStamp
	for i, f := range []string{k.certFile, k.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return s, fmt.Errorf("TLS file: %w", err)
		}
		s[i] = fileStamp{fi.Size(), fi.ModTime()}
	}
	return s, nil
}

// Current returns the pair in service, reloading it first if the files
// changed since the last check.
func (k *Keypair) Current() *tls.Certificate {
	k.mu.Lock()
	defer k.mu.Unlock()
	if time.Since(k.checked) < k.CheckInterval {
		return k.cert
	}
	k.checked = time.Now()
	stamp, err := k.stat()
	if err == nil && stamp == k.stamp {
		return k.cert
	}
	if err == nil {
		var cert tls.Certificate
		if cert, err = tls.LoadX509KeyPair(k.certFile, k.keyFile); err == nil {
			k.cert, k.stamp = &cert, stamp
		} else {
			err = fmt.Errorf("reloading TLS certificate %s / key %s (the previous pair stays in service): %w", k.certFile, k.keyFile, err)
		}
	}
	k.err = err
	if k.OnReload != nil {
		k.OnReload(err)
	}
	return k.cert
}

// Err is the outcome of the last reload: nil if the files on disk are the
// pair in service.
func (k *Keypair) Err() error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.err
}

// GetCertificate is for tls.Config.GetCertificate (servers).
func (k *Keypair) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	return k.Current(), nil
}

// GetClientCertificate is for tls.Config.GetClientCertificate (clients
// that authenticate): like Go's own choice among static Certificates, it
// sends no certificate when the server's accepted CAs do not cover it, so
// the server answers "certificate required" rather than a bad-certificate
// alert.
func (k *Keypair) GetClientCertificate(cri *tls.CertificateRequestInfo) (*tls.Certificate, error) {
	c := k.Current()
	if cri.SupportsCertificate(c) != nil {
		return &tls.Certificate{}, nil
	}
	return c, nil
}

// LoadPool reads PEM certificates (a CA bundle) into a pool; a file that
// holds none is an error.
func LoadPool(path string) (*x509.CertPool, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("certfile: CA file: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fmt.Errorf("certfile: CA file %s holds no PEM certificate", path)
	}
	return pool, nil
}
