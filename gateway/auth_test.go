package gateway

import (
	"bytes"
	"crypto/tls"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/lock/locktest"
)

const (
	goodToken  = "s3cret-token-0123456789"
	otherToken = "another-token-abcdefgh"
)

func authGateway(t *testing.T, logs io.Writer) *httptest.Server {
	t.Helper()
	toks, err := NewTokens(goodToken, otherToken)
	if err != nil {
		t.Fatal(err)
	}
	opts := Options{Tokens: toks}
	if logs != nil {
		opts.Logger = slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	_, srv := startGateway(t, opts)
	return srv
}

func rawRequest(t *testing.T, method, url, auth, body string) (int, string, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), resp.Header
}

// TestAuthREST: a missing, malformed or wrong token gets 401 with one and
// the same body and a WWW-Authenticate header; the right token works;
// health checks stay open; /metrics does not; tokens never reach the log.
func TestAuthREST(t *testing.T) {
	var logs bytes.Buffer
	srv := authGateway(t, &syncWriter{w: &logs})
	refusals := map[string]string{
		"missing":      "",
		"wrong":        "Bearer wrong-token-0123456789",
		"prefix":       "Bearer " + goodToken[:len(goodToken)-1],
		"longer":       "Bearer " + goodToken + "x",
		"other scheme": "Basic " + goodToken,
		"empty bearer": "Bearer ",
	}
	var first string
	for name, auth := range refusals {
		for _, ep := range []struct{ method, path string }{
			{"POST", "/locks/k"}, {"GET", "/locks/k"}, {"DELETE", "/locks/k?lock_token=x&fencing_token=1"}, {"GET", "/metrics"}, {"GET", "/nowhere"},
		} {
			code, body, h := rawRequest(t, ep.method, srv.URL+ep.path, auth, "")
			if code != http.StatusUnauthorized {
				t.Fatalf("%s token, %s %s: %d %s, want 401", name, ep.method, ep.path, code, body)
			}
			if !strings.HasPrefix(h.Get("WWW-Authenticate"), "Bearer") {
				t.Fatalf("%s token: WWW-Authenticate %q", name, h.Get("WWW-Authenticate"))
			}
			if first == "" {
				first = body
			}
			if body != first {
				t.Fatalf("401 bodies differ: %q (%s token) vs %q", body, name, first)
			}
		}
	}
	if !strings.Contains(first, `"unauthorized"`) {
		t.Fatalf("401 body %q has no unauthorized code", first)
	}

	for _, p := range []string{"/healthz", "/readyz"} {
		if code, body, _ := rawRequest(t, "GET", srv.URL+p, "", ""); code != http.StatusOK {
			t.Fatalf("%s without a token: %d %s, want 200", p, code, body)
		}
	}
	for _, tok := range []string{goodToken, otherToken} {
		code, body, _ := rawRequest(t, "POST", srv.URL+"/locks/k-"+tok[:3], "Bearer "+tok, `{"ttl_ms": 5000}`)
		if code != http.StatusOK {
			t.Fatalf("acquire with a valid token: %d %s", code, body)
		}
	}
	if code, _, _ := rawRequest(t, "GET", srv.URL+"/metrics", "bearer "+goodToken, ""); code != http.StatusOK {
		t.Fatalf("/metrics with a token (scheme in lower case): %d", code)
	}
	srv.Close() // no more log writes
	if strings.Contains(logs.String(), goodToken[:10]) || strings.Contains(logs.String(), "wrong-token") {
		t.Fatalf("a token reached the log:\n%s", logs.String())
	}
	if !strings.Contains(logs.String(), "unauthorized request refused") {
		t.Fatalf("refusals were not logged:\n%s", logs.String())
	}
}

// TestAuthWS: the upgrade request needs the token; without it (or with a
// wrong one) the handshake is answered 401 with the REST body.
func TestAuthWS(t *testing.T) {
	srv := authGateway(t, nil)
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
	var bodies []string
	for _, auth := range []string{"", "Bearer wrong-token-0123456789"} {
		h := http.Header{}
		if auth != "" {
			h.Set("Authorization", auth)
		}
		ws, resp, err := websocket.DefaultDialer.Dial(url, h)
		if err == nil {
			ws.Close()
			t.Fatalf("WebSocket upgrade with auth %q succeeded", auth)
		}
		if resp == nil || resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("upgrade with auth %q: %v %+v, want 401", auth, err, resp)
		}
		b, _ := io.ReadAll(resp.Body)
		bodies = append(bodies, string(b))
	}
	if bodies[0] != bodies[1] {
		t.Fatalf("missing and wrong token got different bodies: %q vs %q", bodies[0], bodies[1])
	}
	ws, _, err := websocket.DefaultDialer.Dial(url, http.Header{"Authorization": {"Bearer " + goodToken}})
	if err != nil {
		t.Fatalf("upgrade with the token: %v", err)
	}
	c := &wsClient{t: t, ws: ws}
	t.Cleanup(func() { ws.Close() })
	c.send(map[string]any{"id": "a", "commandType": 5, "key": "k", "ttl": 5000})
	c.expect("a", "grant", "")
}

// TestTLSGateway: a gateway served over TLS refuses plaintext HTTP and
// WebSocket clients and serves clients that trust its CA.
func TestTLSGateway(t *testing.T) {
	ca, err := certfile.NewMemoryCA("test CA")
	if err != nil {
		t.Fatal(err)
	}
	cert, err := ca.Issue("127.0.0.1", "localhost")
	if err != nil {
		t.Fatal(err)
	}
	g := New(locktest.NewMemStore().NewLocker(), Options{})
	srv := httptest.NewUnstartedServer(g)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}}
	srv.StartTLS()
	t.Cleanup(func() { g.Close(); srv.Close() })
	host := strings.TrimPrefix(srv.URL, "https://")

	resp, err := http.Post("http://"+host+"/locks/k", "application/json", nil)
	if err == nil {
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || strings.Contains(string(b), "lock_token") {
			t.Fatalf("plaintext POST: %s %q, want a refusal", resp.Status, b)
		}
	}
	if ws, _, err := websocket.DefaultDialer.Dial("ws://"+host+"/v1/ws", nil); err == nil {
		ws.Close()
		t.Fatal("plaintext WebSocket upgrade to a TLS gateway succeeded")
	}
	// A TLS client that does not trust the CA is refused too.
	if _, err := http.Get("https://" + host + "/healthz"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("untrusting client: %v, want a certificate error", err)
	}

	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}}
	resp, err = hc.Post("https://"+host+"/locks/k", "application/json", strings.NewReader(`{"ttl_ms": 5000}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("TLS acquire: %s", resp.Status)
	}
	d := websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}
	ws, _, err := d.Dial("wss://"+host+"/v1/ws", nil)
	if err != nil {
		t.Fatalf("wss dial: %v", err)
	}
	ws.Close()
}

// TestLoadTokens: the file format (comments, blank lines, trimming) and
// its errors, which name the line but never the token.
func TestLoadTokens(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good", "# ops team\n\n  "+goodToken+"  \n#"+otherToken+"\r\n"+otherToken+"x\n")
	toks, err := LoadTokens(good)
	if err != nil {
		t.Fatal(err)
	}
	if toks.Len() != 2 || !toks.Valid(goodToken) || toks.Valid(otherToken) || !toks.Valid(otherToken+"x") || toks.Valid("") {
		t.Fatalf("tokens parsed wrong: len %d", toks.Len())
	}
	for name, content := range map[string]string{
		"empty":  "# nothing\n\n",
		"short":  "\nshort-secret\n",
		"spaces": "three fields words-but-long-enough\n",
		"name":   "bad/name words-but-long-enough\n",
	} {
		_, err := LoadTokens(write(name, content))
		if err == nil {
			t.Fatalf("%s file accepted", name)
		}
		if strings.Contains(err.Error(), "short-secret") || strings.Contains(err.Error(), "words") {
			t.Fatalf("%s: error shows the token: %v", name, err)
		}
		t.Logf("%s: %v", name, err)
	}
	// A named line gives its identity; a bare token its digest's.
	named, err := LoadTokens(write("named", "billing "+goodToken+"\n"+otherToken+"\n"))
	if err != nil {
		t.Fatal(err)
	}
	if id, ok := named.Identify(goodToken); !ok || id != "billing" {
		t.Fatalf("named token: identity %q %v, want billing", id, ok)
	}
	if id, ok := named.Identify(otherToken); !ok || id != UnnamedIdentity(otherToken) || strings.Contains(id, otherToken) {
		t.Fatalf("bare token: identity %q %v", id, ok)
	}
	if id, ok := named.Identify("billing"); ok {
		t.Fatalf("an identity's name is not a token: %q", id)
	}
	// Reload swaps the set; a failed reload keeps the old one.
	if err := toks.Reload(write("next", otherToken+"\n")); err != nil || toks.Valid(goodToken) || !toks.Valid(otherToken) {
		t.Fatalf("reload: %v", err)
	}
	if err := toks.Reload(filepath.Join(dir, "missing")); err == nil || !toks.Valid(otherToken) {
		t.Fatalf("failed reload: %v; the old set must stay", err)
	}
}

// syncWriter serialises writes (the gateway logs from many goroutines).
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}
