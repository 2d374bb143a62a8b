package gateway

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"

	"github.com/lockgate/lockgate/lock/locktest"
)

// startGateway serves a gateway over a fresh reference locker.
func startGateway(t testing.TB, opts Options) (*Gateway, *httptest.Server) {
	t.Helper()
	g := New(locktest.NewMemStore().NewLocker(), opts)
	srv := httptest.NewServer(g)
	t.Cleanup(func() { g.Close(); srv.Close() })
	return g, srv
}

// wsClient is a raw protocol client for tests.
type wsClient struct {
	t  testing.TB
	ws *websocket.Conn
}

func dial(t testing.TB, srv *httptest.Server) *wsClient {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", nil)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { ws.Close() })
	return &wsClient{t: t, ws: ws}
}

func (c *wsClient) sendRaw(s string) {
	c.t.Helper()
	if err := c.ws.WriteMessage(websocket.TextMessage, []byte(s)); err != nil {
		c.t.Fatalf("send: %v", err)
	}
}

func (c *wsClient) send(m map[string]any) {
	c.t.Helper()
	b, _ := json.Marshal(m)
	c.sendRaw(string(b))
}

// recv reads the next message (within 5 s).
func (c *wsClient) recv() wire.Reply {
	c.t.Helper()
	c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var r wire.Reply
	if err := c.ws.ReadJSON(&r); err != nil {
		c.t.Fatalf("recv: %v", err)
	}
	return r
}

// expect reads the next message and checks its id, type and error code.
func (c *wsClient) expect(id, typ, code string) wire.Reply {
	c.t.Helper()
	return c.check(c.recv(), id, typ, code)
}

// check fails the test unless r has this id, type and error code ("" for
// none), and returns r.
func (c *wsClient) check(r wire.Reply, id, typ, code string) wire.Reply {
	c.t.Helper()
	got := ""
	if r.Error != nil {
		got = r.Error.Code
	}
	if r.ID != id || r.Type != typ || got != code {
		c.t.Fatalf("got id %q type %q code %q (%+v), want id %q type %q code %q", r.ID, r.Type, got, r.Error, id, typ, code)
	}
	return r
}

// quiet asserts that no message arrives within d: it waits d, then sends a
// probe and requires the probe's reply to be the next message. (A read
// deadline cannot be used: gorilla's connection is unusable after one.)
func (c *wsClient) quiet(d time.Duration) {
	c.t.Helper()
	time.Sleep(d)
	c.send(map[string]any{"id": "probe", "commandType": 4, "key": "__probe__"})
	c.expect("probe", "error", "not_found")
}

// do sends an HTTP request and returns status and decoded JSON body.
func do(t testing.TB, method, url, contentType, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch {
	case contentType == "none": // a body without Content-Type
	case contentType != "":
		req.Header.Set("Content-Type", contentType)
	case body != "":
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := (&http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatalf("%s %s: non-JSON body %q", method, url, data)
		}
	}
	return resp.StatusCode, m, resp.Header
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// tokenValue is the value of a REST fencing_token, {"key", "value"}
// (protocol v1), as a number; 0 when it has another shape.
func tokenValue(v any) float64 {
	m, _ := v.(map[string]any)
	f, _ := m["value"].(float64)
	return f
}

// jsonOf encodes v as JSON.
func jsonOf(t testing.TB, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
