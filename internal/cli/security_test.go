package cli

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/internal/testenv"
)

// TestTLSFlagsBothOrNeither: a certificate without its key (or the other
// way round, or a CA without either) fails at once with a message that
// says what is missing, before anything listens.
func TestTLSFlagsBothOrNeither(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"node", "--id", "1", "--data-dir", dir, "--tls-cert", "x.pem"}, "--tls-cert needs --tls-key"},
		{[]string{"node", "--id", "1", "--data-dir", dir, "--tls-key", "x.key"}, "--tls-key needs --tls-cert"},
		{[]string{"node", "--id", "1", "--data-dir", dir, "--tls-client-ca", "ca.pem"}, "--tls-client-ca needs --tls-cert"},
		// On loopback too: a TLS node always authenticates its peers.
		{[]string{"node", "--id", "1", "--data-dir", dir, "--tls-cert", "x.pem", "--tls-key", "x.key"}, "--tls-cert needs --tls-ca"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tls-cert", "x.pem"}, "--tls-cert needs --tls-key"},
		{[]string{"lock", "inspect", "k", "--token", "a", "--token-file", "b"}, "--token and --token-file exclude each other"},
	} {
		code, _, errOut := run(t, tc.args...)
		if code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want a failure saying %q", tc.args, code, errOut, tc.want)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("the refused node wrote to its data dir: %v", entries)
	}
}

// secureFiles writes a CA, a certificate and key for 127.0.0.1 and a
// tokens file into a temporary directory.
func secureFiles(t *testing.T) (dir string, ca *certfile.MemoryCA) {
	t.Helper()
	dir = t.TempDir()
	ca, err := certfile.NewMemoryCA("cli test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, key, err := ca.IssuePEM("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"ca.pem": ca.PEM, "cert.pem": cert, "key.pem": key,
		"tokens":    []byte("# gateway tokens\n\ncli-test-token-0123456789\n"),
		"token":     []byte("cli-test-token-0123456789\n"),
		"bad-token": []byte("cli-test-token-9876543210\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir, ca
}

// TestNodeTLSFromFiles: the node's TLS from --tls-cert, --tls-key,
// --tls-ca and --tls-client-ca serves the reloadable key pair and trusts
// the CA files; without a CA it is refused with raftlock.ErrNoPeerCA, and
// a CA file that holds no certificate is refused naming its flag.
func TestNodeTLSFromFiles(t *testing.T) {
	dir, ca := secureFiles(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(f("not-pem"), []byte("not a certificate\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	issued, err := ca.Issue("127.0.0.1")
	if err != nil {
		t.Fatal(err)
	}
	leaf, err := x509.ParseCertificate(issued.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	verifies := func(pool *x509.CertPool) bool {
		if pool == nil {
			return false
		}
		_, err := leaf.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
		return err == nil
	}
	node := func(ca, clientCA string) *securityFlags {
		return &securityFlags{cert: f("cert.pem"), key: f("key.pem"), ca: ca, clientCA: clientCA, node: true}
	}

	for _, tc := range []struct {
		name             string
		flags            *securityFlags
		root, clientRoot bool
	}{
		{"--tls-ca", node(f("ca.pem"), ""), true, false},
		{"--tls-client-ca", node("", f("ca.pem")), false, true},
		{"both", node(f("ca.pem"), f("ca.pem")), true, true},
	} {
		nt, err := tc.flags.nodeTLS()
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if nt.Keys == nil || nt.Keys.OnReload == nil {
			t.Errorf("%s: Keys %v; want the reloadable pair, its reloads logged", tc.name, nt.Keys)
		} else if got := nt.Keys.Current(); got == nil || len(got.Certificate) == 0 {
			t.Errorf("%s: the key pair serves no certificate", tc.name)
		}
		if !nt.PeerAuth() {
			t.Errorf("%s: PeerAuth false", tc.name)
		}
		if verifies(nt.RootCAs) != tc.root || verifies(nt.ClientCAs) != tc.clientRoot {
			t.Errorf("%s: RootCAs trusts the CA %v, ClientCAs %v; want %v, %v",
				tc.name, verifies(nt.RootCAs), verifies(nt.ClientCAs), tc.root, tc.clientRoot)
		}
	}

	if nt, err := node("", "").nodeTLS(); !errors.Is(err, raftlock.ErrNoPeerCA) || nt != nil {
		t.Errorf("no CA: %v, %v; want ErrNoPeerCA", nt, err)
	}
	for flag, fl := range map[string]*securityFlags{
		"--tls-ca":        node(f("not-pem"), ""),
		"--tls-client-ca": node(f("ca.pem"), f("not-pem")),
	} {
		if nt, err := fl.nodeTLS(); err == nil || nt != nil || !strings.Contains(err.Error(), flag) {
			t.Errorf("%s holding no certificate: %v, %v; want a refusal naming %s", flag, nt, err, flag)
		}
	}
	bad := node(f("ca.pem"), "")
	bad.key = f("tokens")
	if nt, err := bad.nodeTLS(); err == nil || nt != nil || !strings.Contains(err.Error(), "--tls-key") {
		t.Errorf("a key file holding no key: %v, %v; want a refusal naming --tls-key", nt, err)
	}
	if nt, err := (&securityFlags{node: true}).nodeTLS(); nt != nil || err != nil {
		t.Errorf("no --tls-cert: %v, %v; want no TLS", nt, err)
	}
}

// TestServeTLSAndTokens runs `lockgate serve` with TLS and tokens: the
// lock commands with --tls-ca and --token-file work; without the CA, with
// a wrong token, or in plaintext they are refused; /healthz stays open.
func TestServeTLSAndTokens(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockgate")
	}
	dir, ca := secureFiles(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	bin := testenv.BuildLockgate(t)
	addr := startServe(t, bin, []string{"serve", "--nodes", "1", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "data"),
		"--tls-cert", f("cert.pem"), "--tls-key", f("key.pem"), "--auth-tokens-file", f("tokens")})

	code, out, errOut := run(t, "lock", "acquire", "cli-secure", "--endpoints", addr, "--tls-ca", f("ca.pem"), "--token-file", f("token"))
	if code != 0 {
		t.Fatalf("acquire over TLS with a token: exit %d: %s", code, errOut)
	}
	var lease leaseJSON
	if err := json.Unmarshal([]byte(out), &lease); err != nil || lease.LockToken == "" {
		t.Fatalf("acquire printed %q: %v", out, err)
	}
	code, _, errOut = run(t, "lock", "release", "cli-secure", "--endpoints", addr, "--tls-ca", f("ca.pem"), "--token", "cli-test-token-0123456789",
		"--lock-token", lease.LockToken, "--fencing-token", jsonNumber(lease.FencingToken))
	if code != 0 {
		t.Fatalf("release: exit %d: %s", code, errOut)
	}

	for name, args := range map[string][]string{
		"wrong token": {"--tls-ca", f("ca.pem"), "--token-file", f("bad-token")},
		"no token":    {"--tls-ca", f("ca.pem")},
		"no CA":       {"--token-file", f("token")},
	} {
		code, _, errOut := run(t, append([]string{"lock", "inspect", "cli-secure", "--endpoints", addr, "--timeout", "1s"}, args...)...)
		if code == 0 {
			t.Errorf("%s: inspect succeeded", name)
		}
		t.Logf("%s: %s", name, strings.TrimSpace(errOut))
	}

	// Plain HTTP is refused; the health check is open over https.
	if resp, err := http.Get("http://" + addr + "/healthz"); err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatalf("plaintext /healthz answered 200 %q", b)
		}
	}
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	for path, want := range map[string]int{"/healthz": 200, "/readyz": 200, "/metrics": 401, "/locks/x": 401} {
		resp, err := hc.Get("https://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s without a token: %d, want %d", path, resp.StatusCode, want)
		}
	}
}

func jsonNumber(v uint64) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestNodeServesOnlyTLS runs `lockgate node` with TLS, mutual TLS between
// nodes and tokens: plaintext HTTP and WebSocket are refused on its API, a
// client with the CA and token locks through it, and peers answers over
// https.
func TestNodeServesOnlyTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockgate")
	}
	dir, _ := secureFiles(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	bin := testenv.BuildLockgate(t)
	api := freeAddr(t)
	startProcess(t, bin, "raftlock node 1:", "node", "--id", "1", "--bootstrap", "--data-dir", f("node-1"),
		"--raft-addr", freeAddr(t), "--api-addr", api,
		"--tls-cert", f("cert.pem"), "--tls-key", f("key.pem"), "--tls-ca", f("ca.pem"), "--tls-client-ca", f("ca.pem"),
		"--auth-tokens-file", f("tokens"))

	if resp, err := http.Get("http://" + api + "/healthz"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Fatal("a TLS node answered plaintext /healthz with 200")
		}
	}
	if code, _, _ := run(t, "lock", "inspect", "k", "--endpoints", api, "--token-file", f("token"), "--timeout", "1s"); code == 0 {
		t.Fatal("a plaintext client used a TLS node")
	}
	// The single node elects itself; a waiting acquire rides that out.
	code, out, errOut := run(t, "lock", "acquire", "node-tls", "--wait", "20s", "--endpoints", api, "--tls-ca", f("ca.pem"), "--token-file", f("token"))
	if code != 0 || !strings.Contains(out, `"fencing_token"`) {
		t.Fatalf("acquire through a TLS node: exit %d, %q, %s", code, out, errOut)
	}
	code, out, errOut = run(t, "peers", "--addr", api, "--tls-ca", f("ca.pem"))
	if code != 0 || !strings.Contains(out, "leader: 1") {
		t.Fatalf("peers over https: exit %d, %q, %s", code, out, errOut)
	}
}

// freeAddr returns a loopback address with a port that was free a moment
// ago.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// startProcess runs bin with args until t ends (SIGTERM, then it must
// exit cleanly) and returns, once it printed a line starting with ready,
// the rest of that line.
func startProcess(t *testing.T, bin, ready string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	up := make(chan string, 1)
	// exited is closed when the process has exited, with its status in
	// waitErr: both the start below and the cleanup wait for it.
	exited := make(chan struct{})
	var waitErr error
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if rest, ok := strings.CutPrefix(sc.Text(), ready); ok {
				select {
				case up <- rest:
				default: // printed again: the first one counts
				}
			}
		}
		waitErr = cmd.Wait()
		close(exited)
	}()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
			if waitErr != nil && !t.Failed() {
				t.Errorf("lockgate %s exited with %v after SIGTERM\n%s", args[0], waitErr, stderr.String())
			}
		case <-time.After(15 * time.Second):
			cmd.Process.Kill()
			t.Errorf("lockgate %s did not exit within 15 s of SIGTERM", args[0])
		}
	})
	select {
	case rest := <-up:
		return rest
	case <-exited:
		t.Fatalf("lockgate %s exited: %v\n%s", strings.Join(args, " "), waitErr, stderr.String())
	case <-time.After(60 * time.Second):
		t.Fatalf("lockgate %s printed no %q within 60 s\n%s", args[0], ready, stderr.String())
	}
	return ""
}

// TestMembershipAdminTokensCLI: two `lockgate node` processes with client
// and admin tokens: the second joins with the admin token it presents;
// a join with a client token is 403 and one without a token 401.
func TestMembershipAdminTokensCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockgate")
	}
	dir, _ := secureFiles(t)
	f := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(f("admin"), []byte("# admins\ncli-admin-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildLockgate(t)
	api1 := freeAddr(t)
	common := []string{"--auth-tokens-file", f("tokens"), "--admin-tokens-file", f("admin")}
	startProcess(t, bin, "raftlock node 1:", append([]string{"node", "--id", "1", "--bootstrap", "--data-dir", f("node-1"),
		"--raft-addr", freeAddr(t), "--api-addr", api1}, common...)...)
	startProcess(t, bin, "raftlock node 2:", append([]string{"node", "--id", "2", "--join", api1, "--data-dir", f("node-2"),
		"--raft-addr", freeAddr(t), "--api-addr", freeAddr(t)}, common...)...)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	pl, err := (&raftlock.MembershipClient{}).FetchPeers(ctx, api1)
	if err != nil || len(pl.Voters) != 2 {
		t.Fatalf("peers after the admin-token join: %+v, %v; want 2 voters", pl, err)
	}
	bogus := raftlock.JoinArgs{ServerID: "9", ServerAddr: "127.0.0.1:1", APIAddr: "127.0.0.1:2"}
	for token, want := range map[string]string{"cli-test-token-0123456789": "403", "": "401"} {
		rep, err := (&raftlock.MembershipClient{Token: token}).Join(ctx, []string{api1}, bogus)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("join with token %q: %+v, %v; want %s", token, rep, err, want)
		}
	}
	if pl, err := (&raftlock.MembershipClient{}).FetchPeers(ctx, api1); err != nil || len(pl.PeerAddress) != 2 {
		t.Errorf("peers after refused joins: %+v, %v; want the 2 members only", pl, err)
	}
}
