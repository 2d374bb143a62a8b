package certfile_test

import (
	"crypto/x509"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/internal/certfile"
)

func newCA(t *testing.T, name string) *certfile.MemoryCA {
	t.Helper()
	ca, err := certfile.NewMemoryCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// leaf issues a certificate for hosts from ca and parses it.
func leaf(t *testing.T, ca *certfile.MemoryCA, hosts ...string) *x509.Certificate {
	t.Helper()
	c, err := ca.Issue(hosts...)
	if err != nil {
		t.Fatal(err)
	}
	x, err := x509.ParseCertificate(c.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	return x
}

// TestMemoryCA: a certificate it issues verifies against its Pool for
// every host it names, as a server and as a client; one from another CA
// does not, nor does it for a host it does not name.
func TestMemoryCA(t *testing.T) {
	ca, other := newCA(t, "test CA"), newCA(t, "other CA")
	if !ca.Cert.IsCA || ca.Cert.Subject.CommonName != "test CA" {
		t.Fatalf("CA certificate: IsCA %v, CN %q", ca.Cert.IsCA, ca.Cert.Subject.CommonName)
	}
	mine := leaf(t, ca, "127.0.0.1", "localhost")
	for _, host := range []string{"127.0.0.1", "localhost"} {
		for _, usage := range []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth} {
			if _, err := mine.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: host, KeyUsages: []x509.ExtKeyUsage{usage}}); err != nil {
				t.Errorf("issued certificate, host %s, usage %v: %v", host, usage, err)
			}
		}
	}
	if _, err := mine.Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "example.com"}); err == nil {
		t.Error("issued certificate verified for a host it does not name")
	}
	if _, err := leaf(t, other, "127.0.0.1").Verify(x509.VerifyOptions{Roots: ca.Pool(), DNSName: "127.0.0.1"}); err == nil {
		t.Error("a certificate from another CA verified against the pool")
	}
	if _, err := mine.Verify(x509.VerifyOptions{Roots: other.Pool(), DNSName: "127.0.0.1"}); err == nil {
		t.Error("a certificate verified against another CA's pool")
	}
	if a, b := leaf(t, ca, "localhost"), leaf(t, ca, "localhost"); a.SerialNumber.Cmp(b.SerialNumber) == 0 {
		t.Errorf("two certificates share serial %v", a.SerialNumber)
	}
	if _, _, err := ca.IssuePEM(); err == nil {
		t.Error("a certificate for no host was issued")
	}
}

// TestLoadPool: the CA's PEM file loads into a pool that verifies its
// certificates (and not another CA's); a missing file, a file with no
// PEM certificate and a PEM file holding only a key are refused, naming
// the file.
func TestLoadPool(t *testing.T) {
	ca, other := newCA(t, "test CA"), newCA(t, "other CA")
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	pool, err := certfile.LoadPool(write("ca.pem", ca.PEM))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := leaf(t, ca, "127.0.0.1").Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err != nil {
		t.Errorf("a certificate of the loaded CA: %v", err)
	}
	if _, err := leaf(t, other, "127.0.0.1").Verify(x509.VerifyOptions{Roots: pool, DNSName: "127.0.0.1"}); err == nil {
		t.Error("a certificate of another CA verified against the loaded pool")
	}

	if _, err := certfile.LoadPool(filepath.Join(dir, "none.pem")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
	_, key, err := ca.IssuePEM("localhost")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"text.pem":  []byte("not a certificate\n"),
		"empty.pem": nil,
		"key.pem":   key,
		"der.crt":   ca.Cert.Raw,
	} {
		p := write(name, data)
		if pool, err := certfile.LoadPool(p); err == nil || pool != nil {
			t.Errorf("%s: pool %v, err %v; want a refusal", name, pool, err)
		} else if !strings.Contains(err.Error(), p) {
			t.Errorf("%s: %q does not name the file", name, err)
		}
	}
}
