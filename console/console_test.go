package console_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/lock"
)

const (
	clientToken = "console-client-token-0123456789"
	adminToken  = "console-admin-token-0123456789ab"
)

type tokenSet []string

func (s tokenSet) Valid(t string) bool { return slices.Contains(s, t) }

// syncBuffer is a log sink safe for the nodes' goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cluster is three in-process raftlock nodes with the gateway and the
// console on each, checking a client token and an admin token.
type cluster struct {
	*raftlock.LocalCluster
	log *syncBuffer
}

func startCluster(t *testing.T, configure ...func(*raftlock.Config)) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 400*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.ClientTokens = tokenSet{clientToken}
		cfg.AdminTokens, cfg.MembershipToken = tokenSet{adminToken}, adminToken
		for _, f := range configure {
			f(cfg)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	toks, err := gateway.NewTokens(clientToken)
	if err != nil {
		t.Fatal(err)
	}
	buf := &syncBuffer{}
	for _, s := range c.Servers {
		g := raftgw.Serve(s, gateway.Options{Tokens: toks, Logger: slog.New(slog.NewTextHandler(buf, nil))})
		t.Cleanup(func() { g.Close() })
	}
	return &cluster{LocalCluster: c, log: buf}
}

func (c *cluster) leader(t *testing.T) (leader, follower *raftlock.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		if s.Node == l {
			leader = s
		} else if follower == nil {
			follower = s
		}
	}
	return leader, follower
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
	raw    string
}

func (a answer) code() string {
	if e, ok := a.body["error"].(map[string]any); ok {
		s, _ := e["code"].(string)
		return s
	}
	return ""
}

// call sends one request; token "" sends none; hdr adds headers.
func call(t *testing.T, method, u, token, body string, hdr ...string) answer {
	t.Helper()
	req, err := http.NewRequest(method, u, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	a := answer{status: resp.StatusCode, header: resp.Header, raw: string(raw)}
	json.Unmarshal(raw, &a.body)
	return a
}

func api(s *raftlock.Server, path string) string { return "http://" + s.APIAddr() + path }

// TestCredentials: the data endpoints refuse a request without a valid
// credential, with one answer whatever was wrong; a client token reads;
// an admin token reads and is an admin; the page itself is served to
// anyone, with its security headers.
func TestCredentials(t *testing.T) {
	c := startCluster(t)
	_, f := c.leader(t)
	for _, path := range []string{"/v1/console/whoami", "/v1/console/cluster", "/v1/console/locks", "/v1/console/lock?key=k", raftlock.PathStatus} {
		for _, tok := range []string{"", "wrong-token-0123456789abcdef"} {
			if a := call(t, "GET", api(f, path), tok, ""); a.status != 401 || (path != raftlock.PathStatus && a.code() != "unauthorized") {
				t.Errorf("GET %s with token %q: %d %s, want 401 unauthorized", path, tok, a.status, a.raw)
			}
		}
	}
	for _, tc := range []struct {
		tok, cred string
		admin     bool
	}{{clientToken, "token", false}, {adminToken, "admin-token", true}} {
		a := call(t, "GET", api(f, "/v1/console/whoami"), tc.tok, "")
		if a.status != 200 || a.body["credential"] != tc.cred || a.body["admin"] != tc.admin || a.body["node"] != f.ID() {
			t.Errorf("whoami with the %s: %d %s; want credential %s, admin %v, node %s", tc.cred, a.status, a.raw, tc.cred, tc.admin, f.ID())
		}
	}
	page := call(t, "GET", api(f, "/ui/"), "", "")
	if page.status != 200 || !strings.Contains(page.raw, `id="login"`) {
		t.Fatalf("GET /ui/: %d, want the page (with its login form)", page.status)
	}
	for h, want := range map[string]string{"Content-Security-Policy": "script-src 'self'", "X-Content-Type-Options": "nosniff", "X-Frame-Options": "DENY"} {
		if !strings.Contains(page.header.Get(h), want) {
			t.Errorf("GET /ui/: %s = %q, want it to contain %q", h, page.header.Get(h), want)
		}
	}
	// The admin token is a credential of the lock API too (the console's
	// event stream), besides the client tokens.
	if a := call(t, "POST", api(f, "/locks/admin-key"), adminToken, `{"client_id":"admin","ttl_ms":5000}`); a.status == 401 {
		t.Errorf("the gateway refused the admin token: %d %s", a.status, a.raw)
	}
}

// TestClusterView: the view from a follower lists every member with its
// own status; exactly one is the leader it names, all in its term.
func TestClusterView(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	var v struct {
		Node, LeaderID string
		Term           uint64
		Nodes          []struct {
			ID, APIAddr, State, Error string
			Term, CommitIndex         uint64
			Voter                     bool
		}
	}
	// A member's API address reaches the directory an entry after it
	// joins: until then the view says so (unreachable, no address).
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := call(t, "GET", api(f, "/v1/console/cluster"), clientToken, "")
		if a.status != 200 {
			t.Fatalf("cluster: %d %s", a.status, a.raw)
		}
		json.Unmarshal([]byte(a.raw), &v)
		if !strings.Contains(a.raw, "no API address known") || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond) // the directory entry is another goroutine's apply: polled over HTTP
	}
	if v.LeaderID != l.ID() || v.Node != f.ID() || len(v.Nodes) != 3 {
		t.Fatalf("cluster view %+v: want leader %s, node %s, 3 members", v, l.ID(), f.ID())
	}
	leaders := 0
	for _, m := range v.Nodes {
		if m.Error != "" || !m.Voter || m.Term != v.Term || m.CommitIndex == 0 {
			t.Errorf("member %+v: want reachable voter in term %d with a commit index", m, v.Term)
		}
		if m.State == "leader" {
			leaders++
			if m.ID != l.ID() {
				t.Errorf("member %s says leader, the leader is %s", m.ID, l.ID())
			}
		}
	}
	if leaders != 1 {
		t.Errorf("%d members say leader, want 1", leaders)
	}
}

type locksPage struct {
	Total, Matched int
	Next           string
	WaitersKnown   bool
	Node           string
	Locks          []lockRow
}

// lockRow is one key in a page, or one key's detail (with its queue).
type lockRow struct {
	Key, Mode string
	Waiters   int
	Holders   []struct {
		Owner, Token, Value string
		ExpiresInMs         int64
	}
	Queue []struct {
		Owner     string
		Keys      []string
		WaitingMs int64
	}
}

// TestLockTablePages: a follower's pages, forwarded to the leader, list
// every held key matching the search once, in key order, with its holder;
// bad parameters get their own errors.
func TestLockTablePages(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	ctx := context.Background()
	var want []string
	tokens := map[string]lock.Token{}
	for i := range 130 {
		key := fmt.Sprintf("page/%03d", (i*37)%130) // not in key order
		if i%10 == 0 {
			key = fmt.Sprintf("other/%03d", i)
		} else {
			want = append(want, key)
		}
		le, err := l.TryAcquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: "o-" + key, Value: []byte("v-" + key)})
		if err != nil {
			t.Fatal(err)
		}
		tokens[key] = le.Token
	}
	slices.Sort(want)
	var got []string
	after := ""
	for pages := 0; ; pages++ {
		if pages > 10 {
			t.Fatal("pages do not end")
		}
		a := call(t, "GET", api(f, "/v1/console/locks?q=page/&limit=50&after="+url.QueryEscape(after)), clientToken, "")
		var p locksPage
		json.Unmarshal([]byte(a.raw), &p)
		if a.status != 200 || p.Total != 130 || p.Matched != len(want) || !p.WaitersKnown || p.Node != l.ID() {
			t.Fatalf("page after %q: %d total %d matched %d waitersKnown %v node %s; want 130, %d, true, the leader %s", after, a.status, p.Total, p.Matched, p.WaitersKnown, p.Node, len(want), l.ID())
		}
		for _, lk := range p.Locks {
			got = append(got, lk.Key)
			h := lk.Holders
			if len(h) != 1 || h[0].Owner != "o-"+lk.Key || h[0].Value != "v-"+lk.Key || h[0].Token != fmt.Sprint(uint64(tokens[lk.Key])) || h[0].ExpiresInMs <= 0 || lk.Mode != "exclusive" {
				t.Errorf("row %+v: want owner, value, token %d, a TTL left", lk, tokens[lk.Key])
			}
		}
		if p.Next == "" {
			break
		}
		after = p.Next
	}
	if !slices.Equal(got, want) {
		t.Errorf("pages listed %d keys %v…, want %d in key order", len(got), got[:min(5, len(got))], len(want))
	}
	for _, tc := range []struct{ query, code string }{
		{"limit=0", "invalid_value"}, {"limit=501", "invalid_value"}, {"limit=x", "invalid_value"},
		{"q=" + strings.Repeat("q", 257), "invalid_key"}, {"after=" + strings.Repeat("a", lock.MaxKeyLen+1), "invalid_key"},
	} {
		if a := call(t, "GET", api(f, "/v1/console/locks?"+tc.query), clientToken, ""); a.status != 400 || a.code() != tc.code {
			t.Errorf("locks?%.30s: %d %s, want 400 %s", tc.query, a.status, a.raw, tc.code)
		}
	}
}

// TestLockQueue: one key's detail, asked of a follower, lists its waiters
// in queue order (the leader's queue).
func TestLockQueue(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "queue/k"
	if _, err := l.TryAcquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: "holder"}); err != nil {
		t.Fatal(err)
	}
	detail := func() lockRow {
		a := call(t, "GET", api(f, "/v1/console/lock?key="+url.QueryEscape(key)), clientToken, "")
		if a.status != 200 {
			t.Fatalf("lock: %d %s", a.status, a.raw)
		}
		var r lockRow
		json.Unmarshal([]byte(a.raw), &r)
		return r
	}
	for i, owner := range []string{"first", "second", "third"} {
		go l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: owner})
		// The next waiter queues only once this one is queued: the order
		// is then known.
		for d := detail(); d.Waiters != i+1; d = detail() {
			if ctx.Err() != nil {
				t.Fatalf("waiter %s not queued: %+v", owner, d)
			}
			time.Sleep(10 * time.Millisecond) // polling another process's state over HTTP: no event to await
		}
	}
	d := detail()
	var owners []string
	for _, w := range d.Queue {
		owners = append(owners, w.Owner)
		if len(w.Keys) != 1 || w.Keys[0] != key || w.WaitingMs < 0 {
			t.Errorf("waiter %+v: want keys [%s], a waiting time", w, key)
		}
	}
	if !slices.Equal(owners, []string{"first", "second", "third"}) || d.Holders[0].Owner != "holder" {
		t.Errorf("queue %v, holder %+v; want first, second, third behind holder", owners, d.Holders)
	}
	if a := call(t, "GET", api(f, "/v1/console/lock?key="), clientToken, ""); a.status != 400 || a.code() != "invalid_key" {
		t.Errorf("lock?key=: %d %s, want 400 invalid_key", a.status, a.raw)
	}
}

// TestForceRelease: only an admin credential, from the node's own origin
// and with a JSON body, frees a key; each refusal has its own error and
// leaves the lock held; the release is audited.
func TestForceRelease(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	key := "force/k"
	lease, err := l.TryAcquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: "victim"})
	if err != nil {
		t.Fatal(err)
	}
	body := `{"key":"force/k"}`
	u := api(f, "/v1/console/force-release")
	json := []string{"Content-Type", "application/json"}
	for _, tc := range []struct {
		name, token, body string
		hdr               []string
		status            int
		code              string
	}{
		{"no credential", "", body, json, 401, "unauthorized"},
		{"client token", clientToken, body, json, 403, "forbidden"},
		{"another origin", adminToken, body, append([]string{"Origin", "http://evil.example"}, json...), 403, "forbidden"},
		{"a form's content type", adminToken, body, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "unsupported_media_type"},
		{"no content type", adminToken, body, nil, 415, "unsupported_media_type"},
		{"not JSON", adminToken, `key=force/k`, json, 400, "bad_json"},
		{"unknown field", adminToken, `{"key":"force/k","all":true}`, json, 400, "bad_json"},
		{"bad key", adminToken, `{"key":""}`, json, 400, "invalid_key"},
		{"too large", adminToken, `{"key":"` + strings.Repeat("k", 5000) + `"}`, json, 413, "too_large"},
		{"free key", adminToken, `{"key":"force/free"}`, json, 404, "not_found"},
	} {
		a := call(t, "POST", u, tc.token, tc.body, tc.hdr...)
		if a.status != tc.status || a.code() != tc.code {
			t.Errorf("%s: %d %s, want %d %s", tc.name, a.status, a.raw, tc.status, tc.code)
		}
		if info, err := l.Inspect(ctx, key); err != nil || info.Token != lease.Token {
			t.Fatalf("after %s: inspect %+v, %v; want the lock still held", tc.name, info, err)
		}
	}
	if a := call(t, "GET", u, adminToken, ""); a.status != 404 && a.status != 405 {
		t.Errorf("GET force-release: %d, want it refused", a.status)
	}
	a := call(t, "POST", u, adminToken, body, append([]string{"Origin", "http://" + f.APIAddr()}, json...)...)
	if a.status != 200 || a.body["released"] != float64(1) {
		t.Fatalf("admin force-release from the page's origin: %d %s", a.status, a.raw)
	}
	if _, err := l.Inspect(ctx, key); err == nil {
		t.Error("the key is still held after the force-release")
	}
	log := c.log.String()
	audited := false
	for _, line := range strings.Split(log, "\n") {
		audited = audited || (strings.Contains(line, `msg="console: force-release" `) && strings.Contains(line, "key=force/k") &&
			strings.Contains(line, "holders=[victim/") && strings.Contains(line, "admin-token sha256:"))
	}
	if !audited || strings.Contains(log, adminToken) {
		t.Errorf("audit log: want one line naming the key and the admin token's digest (never the token):\n%s", log)
	}
}

// TestClientCertificate: on TLS nodes a client certificate from the
// cluster CA is a credential — an admin's, by the membership rules — for
// the console and the lock API alike, and still only from the node's own
// origin for force-release; one from another CA is no credential.
func TestClientCertificate(t *testing.T) {
	ca, err := certfile.NewMemoryCA("cluster CA")
	if err != nil {
		t.Fatal(err)
	}
	c := startCluster(t, func(cfg *raftlock.Config) {
		cert, err := ca.Issue("127.0.0.1", "localhost")
		if err != nil {
			t.Fatal(err)
		}
		cfg.TLS = &raftlock.TLS{Certificate: cert, RootCAs: ca.Pool(), ClientCAs: ca.Pool()}
	})
	l, f := c.leader(t)
	pool := ca.Pool() // verifies the nodes
	httpsClient := func(issuer *certfile.MemoryCA) *http.Client {
		var certs []tls.Certificate
		if issuer != nil {
			cert, err := issuer.Issue("operator")
			if err != nil {
				t.Fatal(err)
			}
			certs = append(certs, cert)
		}
		tr := &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}}
		t.Cleanup(tr.CloseIdleConnections)
		return &http.Client{Transport: tr, Timeout: 10 * time.Second}
	}
	withCert, without := httpsClient(ca), httpsClient(nil)
	get := func(hc *http.Client, method, u, body string, hdr ...string) (int, string) {
		req, _ := http.NewRequest(method, u, strings.NewReader(body))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := hc.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	base := "https://" + f.APIAddr()
	if code, body := get(withCert, "GET", base+"/v1/console/whoami", ""); code != 200 || !strings.Contains(body, `"credential":"certificate"`) || !strings.Contains(body, `"admin":true`) {
		t.Errorf("whoami with a cluster-CA certificate: %d %s; want the certificate, an admin", code, body)
	}
	if code, body := get(without, "GET", base+"/v1/console/whoami", ""); code != 401 {
		t.Errorf("whoami without a certificate or token: %d %s, want 401", code, body)
	}
	other, err := certfile.NewMemoryCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	// Go's client offers a certificate only from a CA the server asks for,
	// so the stranger's goes unsent (401); sent anyway, the handshake fails.
	if code, body := get(httpsClient(other), "GET", base+"/v1/console/whoami", ""); code != 0 && code != 401 {
		t.Errorf("a certificate from another CA: %d %s, want 401 or no connection", code, body)
	}
	// The lock API takes the certificate too (the page's event stream).
	if code, body := get(withCert, "POST", "https://"+l.APIAddr()+"/locks/cert-key", `{"client_id":"op","ttl_ms":60000}`, "Content-Type", "application/json"); code != 200 {
		t.Fatalf("acquire with the certificate: %d %s", code, body)
	}
	fr := base + "/v1/console/force-release"
	if code, body := get(withCert, "POST", fr, `{"key":"cert-key"}`, "Content-Type", "application/json", "Origin", "https://evil.example"); code != 403 {
		t.Errorf("force-release with the certificate from another origin: %d %s, want 403", code, body)
	}
	if code, body := get(withCert, "POST", fr, `{"key":"cert-key"}`, "Content-Type", "application/json", "Origin", base); code != 200 {
		t.Errorf("force-release with the certificate from the node's page: %d %s, want 200", code, body)
	}
	if !strings.Contains(c.log.String(), "credential=\"certificate CN=") {
		t.Errorf("the audit line does not name the certificate:\n%s", c.log.String())
	}
}
