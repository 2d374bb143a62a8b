package console_test

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/certfile"
	"github.com/lockgate/lockgate/lock"
)

// attackPage is a page of another origin that makes its visitor's browser
// send the two requests a page can send anywhere without asking the
// server first: a text/plain form post to the membership API (the form
// encodes name=value, so the name is the JSON object and "=" trails it)
// and a no-cors fetch with a form-typed JSON body to the REST API. It
// marks the body data-done once both answers have come back (the form's
// in its frame), whatever they were: the page cannot read them.
const attackPage = `<!doctype html>
<html><body>
<form id="f" method="post" enctype="text/plain" action="%[1]s/v1/cluster/remove" target="sink">
<input type="hidden" name='{"serverId":"%[2]s"}' value="">
</form>
<iframe name="sink" id="sink"></iframe>
<script>
let answered = 0;
const done = () => { if (++answered === 2) document.body.dataset.done = "1"; };
document.getElementById("f").submit();
document.getElementById("sink").onload = done;
fetch("%[1]s/locks/k", {method: "POST", mode: "no-cors",
	headers: {"Content-Type": "application/x-www-form-urlencoded"},
	body: '{"client_id":"x","ttl_ms":86400000}'}).then(done, (e) => { document.body.dataset.fetchError = String(e); done(); });
</script>
</body></html>`

// TestCrossSitePage: a page served from another origin (another port of
// 127.0.0.1) cannot make a browser remove a member of an open loopback
// raftlock node (no tokens: any program that reaches it may) with a
// text/plain form, nor take a 24-hour lock through the gateway's REST API
// with a no-cors fetch; the browser delivers both requests, and the node
// refuses both.
func TestCrossSitePage(t *testing.T) {
	ctx := browser(t)
	start := time.Now()
	cctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(cctx, 2, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 400*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	for _, s := range c.Servers {
		g := raftgw.Serve(s, gateway.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
		t.Cleanup(func() { g.Close() })
	}
	l, err := c.Leader(cctx)
	if err != nil {
		t.Fatal(err)
	}
	var victim string // the member the page tries to remove
	for _, n := range c.Nodes() {
		if n != l {
			victim = n.ID()
		}
	}
	requireMember(t, l, victim)

	// The page posts to the leader: it takes the lock there, and removes
	// the member itself.
	node := "http://" + l.APIAddr()
	attacker := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, attackPage, node, victim)
	}))
	t.Cleanup(attacker.Close)

	p := open(t, ctx, attacker.URL+"/")
	p.waitFor("both requests answered", `document.body?.dataset.done === "1"`, 10*time.Second)
	if e := eval[string](p, "fetch error", `document.body.dataset.fetchError ?? ""`); e != "" {
		t.Fatalf("the page's fetch did not reach the node: %s", e)
	}

	requireMember(t, l, victim)
	if info, err := l.Inspect(cctx, "k"); err == nil {
		t.Errorf("the page's no-cors fetch took the lock: %+v", info)
	}
	t.Logf("cluster, browser and page in %v", time.Since(start).Round(time.Millisecond))
}

// requireMember fails t unless id is in the Raft configuration as n has it.
func requireMember(t *testing.T, n *raftlock.Node, id string) {
	t.Helper()
	f := n.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(f.Configuration().Servers, func(sv raft.Server) bool { return sv.ID == raft.ServerID(id) }) {
		t.Errorf("member %s is gone: the configuration is %+v", id, f.Configuration().Servers)
	}
}

// startOpenCluster is startCluster without tokens: nodes on loopback with
// no credential configured, where anyone may do anything (development).
func startOpenCluster(t *testing.T) *cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 400*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Shutdown)
	buf := &syncBuffer{}
	for _, s := range c.Servers {
		g := raftgw.Serve(s, gateway.Options{Logger: slog.New(slog.NewTextHandler(buf, nil))})
		t.Cleanup(func() { g.Close() })
	}
	return &cluster{LocalCluster: c, log: buf}
}

// TestForwardedHeaderFromClients: X-Lockgate-Console-Forwarded counts
// only from a member. Sent by a client, it neither skips the cross-site
// check (a foreign page's force-release is refused) nor stops a follower
// from forwarding a read to the leader, and the audit line does not take
// the client's word for who forwarded it from where; a follower's own
// forward of the node's page still frees the key, and is audited as such.
func TestForwardedHeaderFromClients(t *testing.T) {
	c := startOpenCluster(t)
	l, f := c.leader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := l.TryAcquire(ctx, "fwd/k", lock.AcquireOptions{TTL: time.Minute, Owner: "victim"}); err != nil {
		t.Fatal(err)
	}
	spoof := []string{"X-Lockgate-Console-Forwarded", "9", "X-Forwarded-For", "203.0.113.9", "Content-Type", "application/json"}
	body := `{"key":"fwd/k"}`
	for _, s := range []*raftlock.Server{l, f} {
		a := call(t, "POST", api(s, "/v1/console/force-release"), "", body, append([]string{"Origin", "http://evil.example"}, spoof...)...)
		if a.status != 403 || a.code() != "forbidden" {
			t.Errorf("force-release at %s from another origin, claiming a member's forward: %d %s, want 403 forbidden", s.ID(), a.status, a.raw)
		}
	}
	if _, err := l.Inspect(ctx, "fwd/k"); err != nil {
		t.Fatalf("the key was freed: %v", err)
	}
	// A read through a follower goes to the leader, header or not.
	if a := call(t, "GET", api(f, "/v1/console/locks"), "", "", "X-Lockgate-Console-Forwarded", "9"); a.status != 200 || a.body["node"] != l.ID() {
		t.Errorf("locks through follower %s with a client's forwarded header: %d %s, want the leader %s's page", f.ID(), a.status, a.raw, l.ID())
	}
	// The node's own page (no Origin: a program) with the header: freed,
	// but the audit line names no forwarder.
	if a := call(t, "POST", api(l, "/v1/console/force-release"), "", body, spoof...); a.status != 200 {
		t.Fatalf("force-release at the leader: %d %s", a.status, a.raw)
	}
	if log := c.log.String(); !strings.Contains(log, "key=fwd/k") || strings.Contains(log, "203.0.113.9") || strings.Contains(log, "forwardedBy=9") {
		t.Errorf("audit line: want the release, without the client's claims of a forwarder:\n%s", log)
	}
	// A follower forwards its page's force-release; the leader frees the
	// key and names the follower and the page's address.
	if _, err := l.TryAcquire(ctx, "fwd/k2", lock.AcquireOptions{TTL: time.Minute, Owner: "victim"}); err != nil {
		t.Fatal(err)
	}
	if a := call(t, "POST", api(f, "/v1/console/force-release"), "", `{"key":"fwd/k2"}`, "Origin", "http://"+f.APIAddr(), "Content-Type", "application/json"); a.status != 200 {
		t.Fatalf("force-release from follower %s's page: %d %s", f.ID(), a.status, a.raw)
	}
	if _, err := l.Inspect(ctx, "fwd/k2"); err == nil {
		t.Error("fwd/k2 is still held")
	}
}

// TestForwardedByAdmin: on nodes without TLS, the admin token a follower
// forwards a force-release with makes it a member's forward: the audit
// line names the follower and the page's address.
func TestForwardedByAdmin(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := l.TryAcquire(ctx, "fwd/admin", lock.AcquireOptions{TTL: time.Minute, Owner: "victim"}); err != nil {
		t.Fatal(err)
	}
	if a := call(t, "POST", api(f, "/v1/console/force-release"), adminToken, `{"key":"fwd/admin"}`, "Origin", "http://"+f.APIAddr(), "Content-Type", "application/json"); a.status != 200 {
		t.Fatalf("force-release from follower %s's page: %d %s", f.ID(), a.status, a.raw)
	}
	log := c.log.String()
	if !strings.Contains(log, "key=fwd/admin") || !strings.Contains(log, "forwardedBy="+f.ID()) || !strings.Contains(log, "forwardedFor=127.0.0.1") {
		t.Errorf("audit line: want the follower and the page's address:\n%s", log)
	}
	// A client token's forwarded header counts for nothing: its read is
	// forwarded to the leader all the same.
	if a := call(t, "GET", api(f, "/v1/console/locks"), clientToken, "", "X-Lockgate-Console-Forwarded", "9"); a.status != 200 || a.body["node"] != l.ID() {
		t.Errorf("locks through follower %s with a client token's forwarded header: %d %s, want the leader's page", f.ID(), a.status, a.raw)
	}
}

// TestRelay: the page's WebSocket relay carries the lock protocol from a
// follower to the leader for the node's own page with a credential, and
// refuses other origins and requests without a credential; the page may
// connect to the node itself only.
func TestRelay(t *testing.T) {
	c := startCluster(t)
	l, f := c.leader(t)
	if csp := call(t, "GET", api(f, "/ui/"), "", "").header.Get("Content-Security-Policy"); !strings.Contains(csp, "connect-src 'self';") {
		t.Errorf("CSP %q: want connect-src 'self' only", csp)
	}
	if a := call(t, "GET", api(f, "/v1/console/ws"), clientToken, ""); a.status != 400 {
		t.Errorf("relay without an upgrade: %d %s, want 400", a.status, a.raw)
	}
	checkRelay(t, &websocket.Dialer{}, "ws", "http", l, f)
}

// TestRelayTLS: the relay on TLS nodes, where it reaches the leader with
// the follower's certificate.
func TestRelayTLS(t *testing.T) {
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
	checkRelay(t, &websocket.Dialer{TLSClientConfig: &tls.Config{RootCAs: ca.Pool()}}, "wss", "https", l, f)
}

// checkRelay dials follower f's relay with d: a page of another origin is
// refused, one without a credential too, and the node's own page with a
// client token reaches the leader l.
func checkRelay(t *testing.T, d *websocket.Dialer, wsScheme, scheme string, l, f *raftlock.Server) {
	t.Helper()
	relay := wsScheme + "://" + f.APIAddr() + "/v1/console/ws"
	protocols := func(tok string) []string {
		return []string{gateway.Subprotocol, gateway.BearerSubprotocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(tok))}
	}
	dial := func(origin string, subprotocols []string) (*websocket.Conn, int) {
		h := http.Header{}
		if origin != "" {
			h.Set("Origin", origin)
		}
		dd := *d
		dd.Subprotocols, dd.HandshakeTimeout = subprotocols, 10*time.Second
		ws, resp, err := dd.Dial(relay, h)
		if err != nil {
			if resp == nil {
				t.Fatalf("dial %s: %v", relay, err)
			}
			return nil, resp.StatusCode
		}
		t.Cleanup(func() { ws.Close() })
		return ws, resp.StatusCode
	}
	if _, code := dial(scheme+"://evil.example", protocols(clientToken)); code != 403 {
		t.Errorf("relay from another origin: %d, want 403", code)
	}
	if _, code := dial(scheme+"://"+f.APIAddr(), []string{gateway.Subprotocol}); code != 401 {
		t.Errorf("relay without a credential: %d, want 401", code)
	}
	ws, code := dial(scheme+"://"+f.APIAddr(), protocols(clientToken))
	if code != 101 {
		t.Fatalf("relay from the node's page: %d, want 101", code)
	}
	if ws.Subprotocol() != gateway.Subprotocol {
		t.Errorf("relay from the node's page: subprotocol %q, want %s", ws.Subprotocol(), gateway.Subprotocol)
	}
	ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	if err := ws.WriteJSON(map[string]any{"id": "i1", "commandType": 4, "key": "relay/k"}); err != nil {
		t.Fatal(err)
	}
	var reply struct {
		ID    string `json:"id"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if err := ws.ReadJSON(&reply); err != nil {
		t.Fatal(err)
	}
	// A follower would answer not_leader: the leader answers.
	if reply.ID != "i1" || reply.Error == nil || reply.Error.Code != "not_found" {
		t.Errorf("inspect through follower %s's relay: %+v, want the leader %s's not_found", f.ID(), reply, l.ID())
	}
}
