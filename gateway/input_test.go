package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

// TestInvalidUTF8Key: a text frame that is not valid UTF-8 (here in the
// key) closes the connection with 1007, as RFC 6455 §8.1 requires, and
// grants nothing. (Before, "a\xff" was rewritten to "a\uFFFD" and
// granted, so "a\xff" and "a\xfe" were one lock.)
func TestInvalidUTF8Key(t *testing.T) {
	_, srv := startGateway(t, Options{})
	for _, frame := range []string{
		"{\"id\":\"1\",\"commandType\":5,\"key\":\"a\xff\",\"ttl\":60000}",
		"{\"id\":\"2\",\"commandType\":1,\"key\":\"a\xfe\",\"ttl\":60000}",
		"{\"id\":\"3\",\"commandType\":5,\"key\":\"ok\",\"value\":\"\xc3\",\"ttl\":60000}",
		"{\"id\":\"\xed\xa0\x80\",\"commandType\":4,\"key\":\"k\"}", // an encoded surrogate
	} {
		c := dial(t, srv)
		c.sendRaw(frame)
		c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, msg, err := c.ws.ReadMessage()
		var ce *websocket.CloseError
		if !errors.As(err, &ce) || ce.Code != websocket.CloseInvalidFramePayloadData {
			t.Errorf("frame %q: got message %q, error %v; want close 1007", frame, msg, err)
		}
	}
	c := dial(t, srv)
	for _, key := range []string{"a\ufffd", "ok"} {
		c.send(map[string]any{"id": "i", "commandType": 4, "key": key})
		c.expect("i", "error", "not_found")
	}
}

// TestWSNullAndTrailing: a frame that is not exactly one JSON object is
// bad_json; ttl is bounded before it is turned into a duration.
func TestWSNullAndTrailing(t *testing.T) {
	_, srv := startGateway(t, Options{})
	c := dial(t, srv)
	for _, tc := range []struct{ frame, id, code string }{
		{`null`, "", "bad_json"},
		{` null `, "", "bad_json"},
		{`"x"`, "", "bad_json"},
		{`{"id":"a","commandType":4,"key":"k"} {"id":"b"}`, "a", "bad_json"},
		{`{"id":"a","commandType":4,"key":"k"}x`, "a", "bad_json"},
		{`{"id":"s1","commandType":5,"key":"a\ud800","ttl":60000}`, "s1", "bad_json"},
		{`{"id":"s2","commandType":5,"key":"a\udbff","ttl":60000}`, "s2", "bad_json"},
		{`{"id":"s3","commandType":5,"key":"a\udc00\ud800","ttl":60000}`, "s3", "bad_json"},
		{`{"id":"s4","commandType":5,"key":"k","value":"\ud83d\u0041"}`, "s4", "bad_json"},
		{`{"id":"t","commandType":5,"key":"k","ttl":9223372036855}`, "t", "invalid_ttl"},
		{`{"id":"t2","commandType":5,"key":"k","ttl":9223372036854775807}`, "t2", "invalid_ttl"},
		{`{"id":"t3","commandType":5,"key":"k","ttl":-9223372036854775808}`, "t3", "invalid_ttl"},
	} {
		c.sendRaw(tc.frame)
		c.expect(tc.id, "error", tc.code)
	}
	c.send(map[string]any{"id": "i", "commandType": 4, "key": "k"})
	c.expect("i", "error", "not_found")
	c.sendRaw(`{"id":"i2","commandType":4,"key":"a\ufffd"}`)
	c.expect("i2", "error", "not_found")
	// A surrogate pair, and an escaped backslash before "u", are text.
	c.sendRaw(`{"id":"p","commandType":5,"key":"a\ud83d\ude00","ttl":60000}`)
	if g := c.expect("p", "grant", ""); g.Key != "a\U0001F600" {
		t.Errorf("key %q", g.Key)
	}
	c.sendRaw(`{"id":"b","commandType":5,"key":"a\\ud800","ttl":60000}`)
	if g := c.expect("b", "grant", ""); g.Key != `a\ud800` {
		t.Errorf("key %q", g.Key)
	}
}

// TestWSLeaseFieldsValidated: renew, release and inspect check the key and
// the lock token's format in the gateway before the backend sees them
// (a 300-character lock token once failed other clients' batches).
func TestWSLeaseFieldsValidated(t *testing.T) {
	_, srv := startGateway(t, Options{})
	c := dial(t, srv)
	c.send(map[string]any{"id": "g", "commandType": 5, "key": "k", "ttl": 60000})
	g := c.expect("g", "grant", "")
	long := strings.Repeat("a", 300)
	for _, tc := range []struct {
		cmd              int
		key, token, code string
	}{
		{3, "k", long, "invalid_handle"},
		{2, "k", long, "invalid_handle"},
		{3, "k", "x", "invalid_handle"},
		{2, "k", "ZZ" + g.LockToken[2:], "invalid_handle"},
		{3, strings.Repeat("k", 300), g.LockToken, "invalid_key"},
		{2, "a\u0001", g.LockToken, "invalid_key"},
		{4, strings.Repeat("k", 300), "", "invalid_key"},
		{4, "a\u0001", "", "invalid_key"},
	} {
		id := fmt.Sprint("c", tc.cmd, tc.code)
		m := map[string]any{"id": id, "commandType": tc.cmd, "key": tc.key}
		if tc.cmd != 4 {
			m["lockToken"], m["fencingToken"] = tc.token, g.FencingToken
		}
		c.send(m)
		c.expect(id, "error", tc.code)
	}
	// The lease is untouched and still renews.
	c.send(map[string]any{"id": "r", "commandType": 3, "key": "k", "lockToken": g.LockToken, "fencingToken": g.FencingToken})
	c.expect("r", "renewed", "")
}

// TestRESTNullAndTrailing: a body that is not exactly one JSON object is
// bad_json; wait_ms and ttl_ms are bounded before any arithmetic (once,
// wait_ms 9223372036855 overflowed to a negative wait); renew, release and
// inspect check key and lock token before the backend sees them.
func TestRESTNullAndTrailing(t *testing.T) {
	_, srv := startGateway(t, Options{})
	u := srv.URL + "/locks/k"
	_, held, _ := do(t, "POST", srv.URL+"/locks/held", "", `{"ttl_ms":60000}`)
	token := held["lock_token"].(string)
	lease := func(tok string) string {
		return fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, tok, jsonOf(t, held["fencing_token"]))
	}
	for _, tc := range []struct {
		method, url, body string
		status            int
		code              string
	}{
		{"POST", u, `null`, 400, "bad_json"},
		{"POST", u, ` null`, 400, "bad_json"},
		{"POST", u, `{} {}`, 400, "bad_json"},
		{"POST", u, `{"ttl_ms":60000}x`, 400, "bad_json"},
		{"POST", u, `{"ttl_ms":60000}` + "\n" + `null`, 400, "bad_json"},
		{"PUT", u, `null`, 400, "bad_json"},
		{"POST", u, `{"client_id":"\udc00"}`, 400, "bad_json"},
		{"POST", u, `{"value":"x\ud800y"}`, 400, "bad_json"},
		{"DELETE", u, lease(token) + `{}`, 400, "bad_json"},
		{"POST", u, `{"wait_ms":9223372036855}`, 400, "invalid_wait"},
		{"POST", u, `{"wait_ms":9223372036854775807}`, 400, "invalid_wait"},
		{"POST", u, `{"wait_ms":-1}`, 400, "invalid_wait"},
		{"POST", u, `{"wait_ms":300001}`, 400, "invalid_wait"},
		{"POST", u, `{"ttl_ms":9223372036855}`, 400, "invalid_ttl"},
		{"PUT", srv.URL + "/locks/held", `{"lock_token":"` + token + `","fencing_token":1,"ttl_ms":-9223372036854775808}`, 400, "invalid_ttl"},
		{"PUT", srv.URL + "/locks/held", lease(strings.Repeat("a", 300)), 400, "invalid_handle"},
		{"DELETE", srv.URL + "/locks/held", lease(strings.Repeat("a", 300)), 400, "invalid_handle"},
		{"DELETE", srv.URL + "/locks/held?lock_token=x&fencing_token=1", ``, 400, "invalid_handle"},
		{"DELETE", srv.URL + "/locks/" + strings.Repeat("k", 300), lease(token), 400, "invalid_key"},
		{"PUT", srv.URL + "/locks/a%01", lease(token), 400, "invalid_key"},
		{"GET", srv.URL + "/locks/a%FF", ``, 400, "invalid_key"},
		{"GET", srv.URL + "/locks/" + strings.Repeat("k", 300), ``, 400, "invalid_key"},
	} {
		code, m, _ := do(t, tc.method, tc.url, "", tc.body)
		if code != tc.status || errCode(m) != tc.code {
			t.Errorf("%s %s %q: %d %v, want %d %s", tc.method, tc.url, tc.body, code, m, tc.status, tc.code)
		}
	}
	// Nothing was granted, nothing was released.
	if code, m, _ := do(t, "GET", u, "", ""); code != 404 {
		t.Errorf("GET k = %d %v, want 404", code, m)
	}
	if code, m, _ := do(t, "GET", srv.URL+"/locks/held", "", ""); code != 200 || tokenValue(m["fencing_token"]) != tokenValue(held["fencing_token"]) || tokenValue(held["fencing_token"]) == 0 {
		t.Errorf("GET held = %d %v", code, m)
	}
}
