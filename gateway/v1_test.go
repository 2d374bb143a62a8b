package gateway

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
)

// Protocol v1's findings, one test each: what a client written
// from docs/protocol.md alone tripped over.

// TestV1OneTokenShape (finding 1): the fencing token is {"key", "value"}
// in every message of both protocols, and REST takes it back as it gave
// it; the bare number is still read.
func TestV1OneTokenShape(t *testing.T) {
	_, srv := startGateway(t, Options{})
	u := srv.URL + "/locks/v1-shape"
	code, a, _ := do(t, "POST", u, "application/json", `{"client_id":"a","ttl_ms":60000}`)
	tok, ok := a["fencing_token"].(map[string]any)
	if code != 200 || !ok || tok["key"] != "v1-shape" || tokenValue(tok) == 0 {
		t.Fatalf("POST = %d %v: want fencing_token {key, value}", code, a)
	}
	code, m, _ := do(t, "POST", u, "application/json", `{"client_id":"b"}`)
	if h, _ := m["error"].(map[string]any)["holder"].(map[string]any); code != 409 || jsonOf(t, h["fencing_token"]) != jsonOf(t, tok) {
		t.Fatalf("held = %d %v: want the holder's token %v", code, m, tok)
	}
	lease := fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s,"ttl_ms":60000}`, a["lock_token"], jsonOf(t, tok))
	if code, m, _ := do(t, "PUT", u, "application/json", lease); code != 200 {
		t.Fatalf("PUT with the token as granted = %d %v", code, m)
	}
	wrongKey := fmt.Sprintf(`{"lock_token":%q,"fencing_token":{"key":"other","value":%v}}`, a["lock_token"], tokenValue(tok))
	if code, m, _ := do(t, "DELETE", u, "application/json", wrongKey); code != 400 || errCode(m) != "bad_json" {
		t.Fatalf("DELETE naming another key's token = %d %v, want 400 bad_json", code, m)
	}
	old := fmt.Sprintf(`{"lock_token":%q,"fencing_token":%v}`, a["lock_token"], tokenValue(tok))
	if code, m, _ := do(t, "DELETE", u, "application/json", old); code/100 != 2 {
		t.Fatalf("DELETE with the pre-v1 bare number = %d %v", code, m)
	}

	// WebSocket: the held error's holder has the grant's shape.
	c1, c2 := dial(t, srv), dial(t, srv)
	c1.send(map[string]any{"id": "g", "commandType": 5, "key": "v1-ws", "ttl": 60000})
	g := c1.expect("g", "grant", "")
	c2.send(map[string]any{"id": "h", "commandType": 5, "key": "v1-ws"})
	if e := c2.expect("h", "error", "held"); e.Error.Holder == nil || e.Error.Holder.FencingToken == nil || *e.Error.Holder.FencingToken != *g.FencingToken {
		t.Fatalf("held error %+v, want holder.fencingToken %+v", e.Error, g.FencingToken)
	}
}

// TestV1ErrorsAsTabled (finding 2): the codes the table gives; field names
// are exact and unknown ones refused, as on REST.
func TestV1ErrorsAsTabled(t *testing.T) {
	_, srv := startGateway(t, Options{})
	c := dial(t, srv)
	for _, tc := range []struct{ frame, id, code string }{
		{`{"id":"e1","commandType":5,"key":""}`, "e1", "invalid_key"},
		{`{"id":"e2","commandType":4,"key":""}`, "e2", "invalid_key"},
		{`{"id":"e3","commandType":2,"key":"","lockToken":"0123456789abcdef0123456789abcdef","fencingToken":{"key":"","value":1}}`, "e3", "invalid_key"},
		{`{"id":"m","commandType":5}`, "m", "missing_field"},
		{`null`, "", "bad_json"},
		{`{"id":"u1","commandType":5,"key":"k","tll":5000}`, "u1", "bad_json"},
		{`{"id":"u2","commandType":5,"key":"k","TTL":5000}`, "u2", "bad_json"},
		{`{"ID":"u3","commandType":5,"key":"k"}`, "", "bad_json"},
	} {
		c.sendRaw(tc.frame)
		c.expect(tc.id, "error", tc.code)
	}
	// None of them took the key.
	c.send(map[string]any{"id": "i", "commandType": 4, "key": "k"})
	c.expect("i", "error", "not_found")
}

// TestV1AnswersAlwaysCome (finding 3): an error for a request the server
// could not decode carries its id when it can be read; cancelled names
// its key; an idle connection is closed with a close frame and a reason.
func TestV1AnswersAlwaysCome(t *testing.T) {
	_, srv := startGateway(t, Options{IdleTimeout: 300 * time.Millisecond})
	c := dial(t, srv)
	c.sendRaw(`{"id":"s","commandType":5,"key":"a\ud800"}`)
	c.expect("s", "error", "bad_json")
	long := strings.Repeat("x", wire.MaxIDLen+1)
	c.sendRaw(`{"id":"` + long + `","commandType":4,"key":"k"}`)
	c.expect(long, "error", "bad_json")

	c.send(map[string]any{"id": "h", "commandType": 5, "key": "busy", "ttl": 60000})
	c.expect("h", "grant", "")
	w := dial(t, srv)
	w.send(map[string]any{"id": "w", "commandType": 1, "key": "busy"})
	c.expect("", "wanted", "")
	w.send(map[string]any{"id": "x", "commandType": 6, "target": "w"})
	for _, r := range []wire.Reply{w.recv(), w.recv()} {
		switch {
		case r.ID == "x" && r.Type == wire.TypeCancelled:
			if r.Key != "busy" {
				t.Errorf("cancelled %+v, want key busy", r)
			}
		case r.ID == "w" && r.Type == wire.TypeError && r.Error.Code == wire.CodeCancelled:
		default:
			t.Errorf("after cancel: %+v", r)
		}
	}

	idle := dial(t, srv)
	idle.ws.SetReadDeadline(time.Now().Add(10 * time.Second))
	idle.ws.SetPingHandler(func(string) error { return nil }) // a client that answers nothing
	_, _, err := idle.ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseGoingAway || !strings.Contains(ce.Text, "idle") {
		t.Fatalf("idle connection ended with %v, want close 1001 naming idleness", err)
	}
}

// TestV1WaitMs (finding 4): a server-side bound on the wait, answered
// timeout with the request's id; the caller holds nothing after it.
func TestV1WaitMs(t *testing.T) {
	_, srv := startGateway(t, Options{})
	a, b := dial(t, srv), dial(t, srv)
	a.send(map[string]any{"id": "g", "commandType": 1, "key": "k", "ttl": 60000})
	g := a.expect("g", "grant", "")
	start := time.Now()
	b.send(map[string]any{"id": "w", "commandType": 1, "key": "k", "waitMs": 200})
	b.expect("w", "error", "timeout")
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Errorf("timeout after %v, want ≥ 200 ms", d)
	}
	a.expect("", "wanted", "") // b's wait made a's lease wanted
	b.send(map[string]any{"id": "bad", "commandType": 1, "key": "k", "waitMs": -1})
	b.expect("bad", "error", "invalid_wait")
	a.send(map[string]any{"id": "r", "commandType": 2, "key": "k", "lockToken": g.LockToken, "fencingToken": g.FencingToken, "ack": true})
	a.expect("r", "released", "")
	a.send(map[string]any{"id": "i", "commandType": 4, "key": "k"})
	a.expect("i", "error", "not_found") // the timed-out waiter was not granted
}

// TestV1BrowserCredential (finding 5): a browser's WebSocket cannot set
// Authorization; the token travels in a subprotocol, and the gateway
// selects lockgate.v1.
func TestV1BrowserCredential(t *testing.T) {
	toks, err := NewTokens("s3cret-token-0123456789")
	if err != nil {
		t.Fatal(err)
	}
	_, srv := startGateway(t, Options{Tokens: toks})
	url := "ws" + strings.TrimPrefix(srv.URL, "http") + "/v1/ws"
	d := websocket.Dialer{Subprotocols: []string{Subprotocol, BearerSubprotocolPrefix + base64.RawURLEncoding.EncodeToString([]byte("s3cret-token-0123456789"))}}
	hdr := http.Header{"Origin": {"https://app.example"}}
	ws, resp, err := d.Dial(url, hdr)
	if err != nil {
		t.Fatalf("dial with the token in a subprotocol: %v (%v)", err, resp)
	}
	defer ws.Close()
	if ws.Subprotocol() != Subprotocol {
		t.Errorf("selected subprotocol %q, want %q", ws.Subprotocol(), Subprotocol)
	}
	bad := websocket.Dialer{Subprotocols: []string{Subprotocol, BearerSubprotocolPrefix + base64.RawURLEncoding.EncodeToString([]byte("wrong"))}}
	if _, resp, err := bad.Dial(url, nil); err == nil || resp == nil || resp.StatusCode != 401 {
		t.Fatalf("a wrong subprotocol token: %v %v, want 401", err, resp)
	}
}

// TestV1OriginPolicy: cross-origin pages are refused when the gateway has
// no tokens and was reached on a non-loopback address, unless allowed.
func TestV1OriginPolicy(t *testing.T) {
	toks, _ := NewTokens("t0ken-for-origin")
	req := func(origin, local string, token bool) *http.Request {
		r := httptest.NewRequest("GET", "http://lock.example:8080/v1/ws", nil)
		if origin != "" {
			r.Header.Set("Origin", origin)
		}
		if token {
			r.Header.Set("Sec-WebSocket-Protocol", Subprotocol+", "+BearerSubprotocolPrefix+base64.RawURLEncoding.EncodeToString([]byte("t0ken-for-origin")))
		}
		addr, _ := net.ResolveTCPAddr("tcp", local)
		return r.WithContext(context.WithValue(r.Context(), http.LocalAddrContextKey, addr))
	}
	for _, tc := range []struct {
		name   string
		opts   Options
		origin string
		local  string
		token  bool
		want   bool
	}{
		{"no origin: a program", Options{}, "", "10.0.0.5:8080", false, true},
		{"same origin", Options{}, "http://lock.example:8080", "10.0.0.5:8080", false, true},
		{"cross origin, no tokens, public bind", Options{}, "https://evil.example", "10.0.0.5:8080", false, false},
		{"cross origin, no tokens, loopback", Options{}, "https://evil.example", "127.0.0.1:8080", false, true},
		{"cross origin, tokens, the page presents one", Options{Tokens: toks}, "https://evil.example", "10.0.0.5:8080", true, true},
		// A browser's client certificate goes with any page's request.
		{"cross origin, tokens, no token presented", Options{Tokens: toks}, "https://evil.example", "10.0.0.5:8080", false, false},
		{"allowed origin", Options{AllowedOrigins: []string{"https://app.example"}}, "https://app.example", "10.0.0.5:8080", false, true},
		{"not in the allow-list", Options{AllowedOrigins: []string{"https://app.example"}, Tokens: toks}, "https://evil.example", "127.0.0.1:8080", true, false},
		{"any", Options{AllowedOrigins: []string{"*"}}, "https://evil.example", "10.0.0.5:8080", false, true},
	} {
		g := New(nil, tc.opts)
		if got := g.originAllowed(req(tc.origin, tc.local, tc.token)); got != tc.want {
			t.Errorf("%s: allowed %v, want %v", tc.name, got, tc.want)
		}
		g.Close()
	}
}
