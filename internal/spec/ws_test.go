package spec

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/gateway"
)

// wsc is one WebSocket connection whose every frame from the server is
// validated against docs/schemas/reply.json.
type wsc struct {
	t       *testing.T
	s       *spec
	name    string
	c       *websocket.Conn
	backlog []map[string]any // frames read while awaiting another
}

// dial upgrades to url's /v1/ws and validates the upgrade's answer
// against the spec's GET /v1/ws; it returns nil and the response when the
// upgrade is refused.
func dial(t *testing.T, s *spec, name, base string, h http.Header, protocols ...string) (*wsc, *http.Response) {
	t.Helper()
	d := websocket.Dialer{HandshakeTimeout: 5 * time.Second, Subprotocols: protocols}
	c, resp, err := d.Dial(strings.Replace(base, "http://", "ws://", 1)+"/v1/ws", h)
	if resp == nil {
		t.Fatalf("%s: dialing: %v", name, err)
	}
	var data []byte
	if resp.Body != nil {
		data, _ = io.ReadAll(resp.Body)
	}
	req := httptest.NewRequest("GET", base+"/v1/ws", nil)
	in := s.input(t, req, "/v1/ws", nil)
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: in.Options}
	out.SetBodyBytes(data)
	if verr := openapi3filter.ValidateResponse(context.Background(), out); verr != nil {
		t.Errorf("%s: the upgrade's answer does not match docs/openapi.yaml: %v\nbody: %s", name, verr, data)
	}
	if err != nil {
		return nil, resp
	}
	w := &wsc{t: t, s: s, name: name, c: c}
	t.Cleanup(func() { c.Close() })
	return w, resp
}

// send writes a text frame, after checking what request.json says of it
// (want: reqValid, reqInvalid or reqSkip).
func (w *wsc) send(frame string, want int) {
	w.t.Helper()
	err := w.s.request(frame)
	switch {
	case want == reqValid && err != nil:
		w.t.Errorf("%s: docs/schemas/request.json refuses %s, which the server takes for well-formed: %v", w.name, frame, err)
	case want == reqInvalid && err == nil:
		w.t.Errorf("%s: docs/schemas/request.json accepts %s, which the server refuses", w.name, frame)
	}
	if err := w.c.WriteMessage(websocket.TextMessage, []byte(frame)); err != nil {
		w.t.Fatalf("%s: writing: %v", w.name, err)
	}
}

// next returns the first frame (earlier ones kept for later calls) that
// match accepts, validating each as it is read.
func (w *wsc) next(what string, match func(map[string]any) bool) map[string]any {
	w.t.Helper()
	for i, m := range w.backlog {
		if match(m) {
			w.backlog = append(w.backlog[:i], w.backlog[i+1:]...)
			return m
		}
	}
	for {
		w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		typ, data, err := w.c.ReadMessage()
		if err != nil {
			w.t.Fatalf("%s: awaiting %s: %v", w.name, what, err)
		}
		if typ != websocket.TextMessage {
			w.t.Errorf("%s: a frame of type %d", w.name, typ)
			continue
		}
		if err := w.s.frame(string(data)); err != nil {
			w.t.Errorf("%s: a frame that does not match docs/schemas/reply.json: %s\n%v", w.name, data, err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			w.t.Fatalf("%s: %v: %s", w.name, err, data)
		}
		if match(m) {
			return m
		}
		w.backlog = append(w.backlog, m)
	}
}

// reply awaits the answer to request id (id "": an answer without id, not
// a push) and checks its type and, for an error, its code.
func (w *wsc) reply(id, typ, code string) map[string]any {
	w.t.Helper()
	m := w.next(fmt.Sprintf("the answer to %q", id), func(m map[string]any) bool {
		got, has := m["id"].(string)
		if id == "" {
			return !has && m["type"] != "wanted"
		}
		return got == id
	})
	if m["type"] != typ {
		w.t.Errorf("%s: request %q answered %v, the docs promise a %s", w.name, id, m, typ)
	}
	if code != "" {
		e, _ := m["error"].(map[string]any)
		if e["code"] != code {
			w.t.Errorf("%s: request %q answered %v, the docs promise code %s", w.name, id, m, code)
		}
	}
	return m
}

// closed awaits the server's close frame, and checks its code and that it
// gives a reason.
func (w *wsc) closed(code int) {
	w.t.Helper()
	for {
		w.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, data, err := w.c.ReadMessage()
		if err == nil {
			if verr := w.s.frame(string(data)); verr != nil {
				w.t.Errorf("%s: %s: %v", w.name, data, verr)
			}
			continue
		}
		var ce *websocket.CloseError
		if !errors.As(err, &ce) {
			w.t.Errorf("%s: the connection ended without a close frame: %v", w.name, err)
		} else if ce.Code != code || ce.Text == "" {
			w.t.Errorf("%s: closed %d %q, the docs promise %d with a reason", w.name, ce.Code, ce.Text, code)
		}
		return
	}
}

func leaseOf(t *testing.T, grant map[string]any) (lt, ft string, value int64) {
	t.Helper()
	lt, _ = grant["lockToken"].(string)
	f, _ := grant["fencingToken"].(map[string]any)
	v, _ := f["value"].(float64)
	if lt == "" || v == 0 {
		t.Fatalf("a grant without lockToken or fencingToken.value: %v", grant)
	}
	b, _ := json.Marshal(f)
	return lt, string(b), int64(v)
}

func testWS(t *testing.T, s *spec, n *node) {
	leader := "http://" + n.leader
	a, resp := dial(t, s, "A", leader, nil, "lockgate.v1")
	if p := resp.Header.Get("Sec-WebSocket-Protocol"); p != "lockgate.v1" {
		t.Errorf("the upgrade selected subprotocol %q, the docs promise lockgate.v1", p)
	}
	if f := resp.Header.Get("Lockgate-Features"); f != "wanted" && !strings.HasPrefix(f, "wanted,") {
		t.Errorf("raftlock's upgrade says Lockgate-Features %q, the docs promise wanted first", f)
	}
	b, _ := dial(t, s, "B", leader, nil)

	// A lease's life: try-acquire, inspect, renew (both token shapes),
	// wanted, release with ack, the pushed grant.
	a.send(`{"id":"g1","commandType":5,"key":"w/a","clientId":"alice","ttl":5000,"value":"v","releaseOnDisconnect":false}`, reqValid)
	lt, ft, fv := leaseOf(t, a.reply("g1", "grant", ""))
	a.send(`{"id":"i1","commandType":4,"key":"w/a"}`, reqValid)
	a.reply("i1", "info", "")
	a.send(fmt.Sprintf(`{"id":"n1","commandType":3,"key":"w/a","lockToken":%q,"fencingToken":%s,"ttl":6000}`, lt, ft), reqValid)
	a.reply("n1", "renewed", "")
	a.send(fmt.Sprintf(`{"id":"n2","commandType":3,"key":"w/a","lockToken":%q,"fencingToken":%d}`, lt, fv), reqValid)
	a.reply("n2", "renewed", "")
	b.send(`{"id":"h1","commandType":5,"key":"w/a"}`, reqValid)
	if e := b.reply("h1", "error", "held")["error"].(map[string]any); e["holder"] == nil {
		t.Errorf("held without holder: %v", e)
	}
	b.send(`{"id":"q1","commandType":1,"key":"w/a","ttl":5000}`, reqValid)
	a.next("the wanted push", func(m map[string]any) bool { return m["type"] == "wanted" })
	a.send(fmt.Sprintf(`{"id":"r1","commandType":2,"key":"w/a","lockToken":%q,"fencingToken":%s,"ack":true}`, lt, ft), reqValid)
	a.reply("r1", "released", "")
	blt, bft, _ := leaseOf(t, b.reply("q1", "grant", ""))
	b.send(fmt.Sprintf(`{"commandType":2,"key":"w/a","lockToken":%q,"fencingToken":%s}`, blt, bft), reqValid) // silent
	// Frames of one connection are served concurrently (up to 64 in
	// flight): the silent release has no answer to await, so inspect until
	// it took effect.
	for i := 0; ; i++ {
		id := fmt.Sprintf("i2-%d", i)
		b.send(`{"id":"`+id+`","commandType":4,"key":"w/a"}`, reqValid)
		if m := b.next(id, func(m map[string]any) bool { return m["id"] == id }); m["type"] == "error" {
			if e, _ := m["error"].(map[string]any); e["code"] != "not_found" {
				t.Errorf("inspect after release answered %v, the docs promise not_found", m)
			}
			break
		}
		if i == 1000 {
			t.Fatalf("the silent release never took effect")
		}
		time.Sleep(time.Millisecond)
	}
	a.send(fmt.Sprintf(`{"id":"r2","commandType":2,"key":"w/a","lockToken":%q,"fencingToken":%s,"ack":true}`, lt, ft), reqValid)
	a.reply("r2", "error", "not_held")
	a.send(fmt.Sprintf(`{"id":"n3","commandType":3,"key":"w/a","lockToken":%q,"fencingToken":%s}`, lt, ft), reqValid)
	a.reply("n3", "error", "not_held")

	// waitMs, cancel.
	b.send(`{"id":"g2","commandType":5,"key":"w/b"}`, reqValid)
	b.reply("g2", "grant", "")
	a.send(`{"id":"t1","commandType":1,"key":"w/b","waitMs":50}`, reqValid)
	a.reply("t1", "error", "timeout")
	a.send(`{"id":"c1","commandType":1,"key":"w/b"}`, reqValid)
	a.send(`{"id":"c2","commandType":6,"target":"c1"}`, reqValid)
	if m := a.reply("c2", "cancelled", ""); m["key"] != "w/b" {
		t.Errorf("cancelled names key %v, the docs promise the cancelled acquire's, w/b", m["key"])
	}
	a.reply("c1", "error", "cancelled")
	a.send(`{"id":"c3","commandType":6,"target":"nope"}`, reqValid)
	a.reply("c3", "error", "not_found")

	// Refused frames: every code a frame can provoke, each answered with
	// its id whenever it can be read.
	const lt32 = "0123456789abcdef0123456789abcdef"
	long := strings.Repeat("k", 257)
	longID := strings.Repeat("i", 65)
	for _, c := range []struct {
		frame, id string
		req       int
		code      string
	}{
		{`x`, "", reqInvalid, "bad_json"},
		{`null`, "", reqInvalid, "bad_json"},
		{`[{"id":"x"}]`, "", reqInvalid, "bad_json"},
		{`{"id":"b1","commandType":4,"key":"k","tll":5}`, "b1", reqInvalid, "bad_json"},
		{`{"id":"b2","commandType":4,"Key":"k"}`, "b2", reqInvalid, "bad_json"},
		{`{"id":"b3","commandType":4,"key":"k"} {}`, "b3", reqInvalid, "bad_json"},
		{`{"id":"b4","commandType":4,"key":"a\ud800"}`, "b4", reqSkip, "bad_json"},
		{`{"id":"b5","commandType":"4","key":"k"}`, "b5", reqInvalid, "bad_json"},
		{`{"id":"` + longID + `","commandType":4,"key":"k"}`, longID, reqInvalid, "bad_json"},
		{`{"id":"b6","commandType":2,"key":"k","lockToken":"` + lt32 + `","fencingToken":{"key":"other","value":1}}`, "b6", reqValid, "bad_json"},
		{`{"id":"u1"}`, "u1", reqInvalid, "unknown_command"},
		{`{"id":"u2","commandType":14}`, "u2", reqInvalid, "unknown_command"},
		{`{"id":"m1","commandType":5}`, "m1", reqInvalid, "missing_field"},
		{`{"id":"m2","commandType":2,"key":"k","fencingToken":{"key":"k","value":1}}`, "m2", reqInvalid, "missing_field"},
		{`{"id":"m3","commandType":3,"key":"k","lockToken":"` + lt32 + `"}`, "m3", reqInvalid, "missing_field"},
		{`{"id":"m4","commandType":6}`, "m4", reqInvalid, "missing_field"},
		{`{"id":"k1","commandType":5,"key":""}`, "k1", reqInvalid, "invalid_key"},
		{`{"id":"k2","commandType":5,"key":"` + long + `"}`, "k2", reqInvalid, "invalid_key"},
		{`{"id":"k3","commandType":4,"key":"a\u0001"}`, "k3", reqInvalid, "invalid_key"},
		{`{"id":"k4","commandType":1,"key":""}`, "k4", reqInvalid, "invalid_key"},
		{`{"id":"l1","commandType":5,"key":"e","ttl":5}`, "l1", reqInvalid, "invalid_ttl"},
		{`{"id":"l2","commandType":5,"key":"e","ttl":-1}`, "l2", reqInvalid, "invalid_ttl"},
		{`{"id":"l3","commandType":5,"key":"e","ttl":86400001}`, "l3", reqInvalid, "invalid_ttl"},
		{`{"id":"v1","commandType":5,"key":"e","value":"` + strings.Repeat("v", 4097) + `"}`, "v1", reqInvalid, "invalid_value"},
		{`{"id":"o1","commandType":5,"key":"e","clientId":"` + strings.Repeat("o", 129) + `"}`, "o1", reqInvalid, "invalid_owner"},
		{`{"id":"o2","commandType":5,"key":"e","clientId":"a\u0001"}`, "o2", reqInvalid, "invalid_owner"},
		{`{"id":"d1","commandType":5,"key":"e","lockToken":"xyz"}`, "d1", reqInvalid, "invalid_handle"},
		{`{"id":"d2","commandType":3,"key":"e","lockToken":"` + strings.ToUpper(lt32) + `","fencingToken":1}`, "d2", reqInvalid, "invalid_handle"},
		{`{"id":"w1","commandType":1,"key":"e","waitMs":-1}`, "w1", reqInvalid, "invalid_wait"},
		{`{"id":"w2","commandType":1,"key":"e","waitMs":300001}`, "w2", reqInvalid, "invalid_wait"},
	} {
		a.send(c.frame, c.req)
		a.reply(c.id, "error", c.code)
	}
	if err := a.c.WriteMessage(websocket.BinaryMessage, []byte(`{"id":"bin","commandType":4,"key":"k"}`)); err != nil {
		t.Fatal(err)
	}
	a.reply("", "error", "bad_json")

	// Limits, on the limited gateway: one lock and one wait per connection.
	l1, _ := dial(t, s, "L1", n.limited, nil)
	l2, _ := dial(t, s, "L2", n.limited, nil)
	l1.send(`{"id":"1","commandType":5,"key":"w/l"}`, reqValid)
	l1.reply("1", "grant", "")
	l1.send(`{"id":"2","commandType":5,"key":"w/l2"}`, reqValid)
	l1.reply("2", "error", "too_many_locks")
	l2.send(`{"id":"3","commandType":1,"key":"w/l"}`, reqValid)
	l1.next("the wanted push", func(m map[string]any) bool { return m["type"] == "wanted" })
	l2.send(`{"id":"4","commandType":1,"key":"w/l3"}`, reqValid)
	l2.reply("4", "error", "too_many_waiters")
	l2.send(`{"id":"5","commandType":6,"target":"3"}`, reqValid)
	l2.reply("5", "cancelled", "")
	l2.reply("3", "error", "cancelled")

	// The Origin policy (the limited gateway allows https://good.example).
	if c, resp := dial(t, s, "foreign origin", n.limited, http.Header{"Origin": {"https://evil.example"}}); c != nil || resp.StatusCode != 403 {
		t.Errorf("a foreign origin's upgrade answered %d, the docs promise 403", resp.StatusCode)
	}
	if c, _ := dial(t, s, "allowed origin", n.limited, http.Header{"Origin": {"https://good.example"}}); c == nil {
		t.Errorf("an allowed origin's upgrade was refused")
	}

	// Authentication, on the gateway with tokens.
	if c, resp := dial(t, s, "no token", n.tokens, nil); c != nil || resp.StatusCode != 401 {
		t.Errorf("an upgrade without a token answered %d, the docs promise 401", resp.StatusCode)
	}
	if c, resp := dial(t, s, "wrong token", n.tokens, nil, "lockgate.v1", gateway.BearerSubprotocolPrefix+"bm9wZQ"); c != nil || resp.StatusCode != 401 {
		t.Errorf("an upgrade with a wrong token answered %d, the docs promise 401", resp.StatusCode)
	}
	sub := gateway.BearerSubprotocolPrefix + base64.RawURLEncoding.EncodeToString([]byte(testToken))
	tc, resp := dial(t, s, "subprotocol token", n.tokens, nil, "lockgate.v1", sub)
	if tc == nil {
		t.Fatalf("the token in a subprotocol was refused")
	}
	if p := resp.Header.Get("Sec-WebSocket-Protocol"); p != "lockgate.v1" {
		t.Errorf("the browser upgrade selected %q, the docs promise lockgate.v1", p)
	}
	tc.send(`{"id":"1","commandType":4,"key":"w/none"}`, reqValid)
	tc.reply("1", "error", "not_found")
	if c, _ := dial(t, s, "header token", n.tokens, http.Header{"Authorization": {"Bearer " + testToken}}); c == nil {
		t.Errorf("the token in Authorization was refused")
	}

	// A follower upgrades, and answers not_leader naming the leader.
	f, _ := dial(t, s, "follower", "http://"+n.follower, nil)
	f.send(`{"id":"1","commandType":5,"key":"w/f"}`, reqValid)
	e, _ := f.reply("1", "error", "not_leader")["error"].(map[string]any)
	if l, _ := e["leader"].(map[string]any); l["addr"] != n.leader {
		t.Errorf("not_leader names leader %v, want addr %s", e["leader"], n.leader)
	}

	// Not a WebSocket handshake.
	r := &restClient{t: t, s: s, n: n, client: http.DefaultClient}
	r.do("a plain GET of /v1/ws", call{method: "GET", path: "/v1/ws", status: 400})

	// The closes: too_large then 1009, invalid UTF-8 then 1007.
	big, _ := dial(t, s, "too large", leader, nil)
	big.send(`{"id":"big","commandType":4,"key":"`+strings.Repeat("k", 64<<10)+`"}`, reqSkip)
	big.reply("", "error", "too_large")
	big.closed(websocket.CloseMessageTooBig)
	bad, _ := dial(t, s, "not UTF-8", leader, nil)
	if err := bad.c.WriteMessage(websocket.TextMessage, []byte("{\"id\":\"u\",\"commandType\":4,\"key\":\"a\xff\"}")); err != nil {
		t.Fatal(err)
	}
	bad.closed(websocket.CloseInvalidFramePayloadData)
}
