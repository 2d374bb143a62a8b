package certfile_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"math/big"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/certfile"
)

// pair is a freshly issued certificate for 127.0.0.1, as PEM.
type pair struct {
	cert, key []byte
	serial    *big.Int
}

func issue(t *testing.T, ca *certfile.MemoryCA) pair {
	t.Helper()
	c, k, err := ca.IssuePEM("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	tc, err := tls.X509KeyPair(c, k)
	if err != nil {
		t.Fatal(err)
	}
	x, err := x509.ParseCertificate(tc.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return pair{c, k, x.SerialNumber}
}

// install writes p the way rotation tools do: a new file renamed over the
// old one.
func install(t *testing.T, dir string, cert, key []byte) {
	t.Helper()
	for name, b := range map[string][]byte{"tls.crt": cert, "tls.key": key} {
		tmp := filepath.Join(dir, name+".new")
		if err := os.WriteFile(tmp, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
}

// served dials a TLS server using keys and returns the serial it presents.
func served(t *testing.T, keys *certfile.Keypair, pool *x509.CertPool) *big.Int {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{GetCertificate: keys.GetCertificate})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		if c, err := ln.Accept(); err == nil {
			c.(*tls.Conn).Handshake()
			c.Close()
		}
	}()
	c, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{RootCAs: pool})
	if err != nil {
		t.Fatalf("handshake: %v", err)
	}
	defer c.Close()
	s := c.ConnectionState().PeerCertificates[0].SerialNumber
	c.Close()
	wg.Wait()
	return s
}

// TestRotation: a rotated pair serves at the next handshake; a broken one
// (a certificate with another's key) leaves the last good pair in service
// and is reported; fixing the files recovers.
func TestRotation(t *testing.T) {
	ca, err := certfile.NewMemoryCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b, c := issue(t, ca), issue(t, ca), issue(t, ca)
	install(t, dir, a.cert, a.key)
	keys, err := certfile.Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	keys.CheckInterval = 0
	var reloads []error
	keys.OnReload = func(err error) { reloads = append(reloads, err) }
	pool := ca.Pool()

	if got := served(t, keys, pool); got.Cmp(a.serial) != 0 {
		t.Fatalf("serves serial %v, want the loaded %v", got, a.serial)
	}
	if len(reloads) != 0 {
		t.Fatalf("unchanged files reloaded %d times", len(reloads))
	}
	install(t, dir, b.cert, b.key)
	if got := served(t, keys, pool); got.Cmp(b.serial) != 0 {
		t.Fatalf("after rotation serves %v, want the new %v", got, b.serial)
	}
	if len(reloads) != 1 || reloads[0] != nil {
		t.Fatalf("reloads %v, want one success", reloads)
	}

	install(t, dir, c.cert, b.key) // half-rotated: c's certificate, b's key
	if got := served(t, keys, pool); got.Cmp(b.serial) != 0 {
		t.Fatalf("with a mismatched pair on disk serves %v, want the last good %v", got, b.serial)
	}
	if keys.Err() == nil || len(reloads) != 2 || reloads[1] == nil {
		t.Fatalf("a broken pair on disk: Err %v, reloads %v; want it reported", keys.Err(), reloads)
	}
	install(t, dir, c.cert, c.key)
	if got := served(t, keys, pool); got.Cmp(c.serial) != 0 || keys.Err() != nil {
		t.Fatalf("after the fix serves %v (Err %v), want %v", got, keys.Err(), c.serial)
	}
}

// TestCheckInterval: within CheckInterval the files are not looked at.
func TestCheckInterval(t *testing.T) {
	ca, err := certfile.NewMemoryCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	a, b := issue(t, ca), issue(t, ca)
	install(t, dir, a.cert, a.key)
	keys, err := certfile.Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	keys.CheckInterval = time.Hour
	install(t, dir, b.cert, b.key)
	if got := served(t, keys, ca.Pool()); got.Cmp(a.serial) != 0 {
		t.Fatalf("serves %v within the check interval, want the loaded %v", got, a.serial)
	}
}

// TestLoadErrors: missing or mismatched files fail at start.
func TestLoadErrors(t *testing.T) {
	ca, err := certfile.NewMemoryCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if _, err := certfile.Load(filepath.Join(dir, "none.crt"), filepath.Join(dir, "none.key")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing files: %v, want ErrNotExist", err)
	}
	a, b := issue(t, ca), issue(t, ca)
	install(t, dir, a.cert, b.key)
	if _, err := certfile.Load(filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")); err == nil {
		t.Error("a certificate with another's key loaded")
	}
}
