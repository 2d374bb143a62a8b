package spec

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// Sessions: every message and code of commands 11–13 and of
// acquires with sessionId, on raftlock's leader; too_many_sessions on the
// limited gateway (one session per connection); unsupported on a gateway
// over a locker without sessions.

func testSessionsWS(t *testing.T, s *spec, n *node) {
	leader := "http://" + n.leader
	a, _ := dial(t, s, "SA", leader, nil)
	b, _ := dial(t, s, "SB", leader, nil)

	a.send(`{"id":"o1","commandType":11,"ttl":5000,"clientId":"carol"}`, reqValid)
	sid, _ := a.reply("o1", "session", "")["sessionId"].(string)
	if sid == "" {
		t.Fatal("session without sessionId")
	}
	a.send(`{"id":"o2","commandType":11}`, reqValid)
	a.reply("o2", "session", "")
	a.send(fmt.Sprintf(`{"id":"g1","commandType":5,"key":"ws/s1","sessionId":%q}`, sid), reqValid)
	if g := a.reply("g1", "grant", ""); g["sessionId"] != sid || g["ttl"] != 5000.0 {
		t.Errorf("a grant in a session: %v, the docs promise sessionId %s and ttl 5000", g, sid)
	}
	a.send(fmt.Sprintf(`{"id":"g2","commandType":8,"keys":["ws/s2","ws/s3"],"sessionId":%q,"ttl":5000}`, sid), reqValid)
	a.reply("g2", "grants", "")
	a.send(fmt.Sprintf(`{"id":"g3","commandType":5,"key":"ws/s4","sessionId":%q,"ttl":6000}`, sid), reqValid)
	a.reply("g3", "error", "invalid_ttl")
	a.send(fmt.Sprintf(`{"id":"r1","commandType":12,"sessionId":%q}`, sid), reqValid)
	a.reply("r1", "sessionRenewed", "")
	b.send(`{"id":"w1","commandType":1,"key":"ws/s1","ttl":5000}`, reqValid)
	a.next("the wanted push", func(m map[string]any) bool { return m["type"] == "wanted" })
	a.send(fmt.Sprintf(`{"id":"c1","commandType":13,"sessionId":%q}`, sid), reqValid)
	a.reply("c1", "sessionClosed", "")
	b.reply("w1", "grant", "")
	for _, c := range []struct {
		frame, id string
		req       int
		code      string
	}{
		{fmt.Sprintf(`{"id":"e1","commandType":12,"sessionId":%q}`, sid), "e1", reqValid, "session_expired"},
		{fmt.Sprintf(`{"id":"e2","commandType":13,"sessionId":%q}`, sid), "e2", reqValid, "session_expired"},
		{fmt.Sprintf(`{"id":"e3","commandType":5,"key":"ws/s5","sessionId":%q}`, sid), "e3", reqValid, "session_expired"},
		{`{"id":"e4","commandType":12}`, "e4", reqInvalid, "missing_field"},
		{`{"id":"e5","commandType":13,"sessionId":"nope"}`, "e5", reqInvalid, "invalid_handle"},
		{`{"id":"e6","commandType":5,"key":"ws/s6","sessionId":"` + strings.Repeat("A", 32) + `"}`, "e6", reqInvalid, "invalid_handle"},
		{`{"id":"e7","commandType":4,"key":"ws/s6","sessionId":"` + strings.Repeat("a", 32) + `"}`, "e7", reqInvalid, "bad_json"},
		{`{"id":"e8","commandType":11,"ttl":5}`, "e8", reqInvalid, "invalid_ttl"},
		{`{"id":"e9","commandType":11,"clientId":"a\u0001"}`, "e9", reqInvalid, "invalid_owner"},
	} {
		a.send(c.frame, c.req)
		a.reply(c.id, "error", c.code)
	}

	// The limited gateway: one session per connection.
	l, _ := dial(t, s, "SL", n.limited, nil)
	l.send(`{"id":"1","commandType":11}`, reqValid)
	l.reply("1", "session", "")
	l.send(`{"id":"2","commandType":11}`, reqValid)
	l.reply("2", "error", "too_many_sessions")

	// A locker without sessions.
	u, resp := dial(t, s, "SU", n.bare, nil)
	if strings.Contains(resp.Header.Get("Lockgate-Features"), "sessions") {
		t.Errorf("a locker without sessions announces %q", resp.Header.Get("Lockgate-Features"))
	}
	for i, frame := range []string{
		`{"id":"u0","commandType":11}`,
		`{"id":"u1","commandType":12,"sessionId":"` + strings.Repeat("a", 32) + `"}`,
		`{"id":"u2","commandType":13,"sessionId":"` + strings.Repeat("a", 32) + `"}`,
		`{"id":"u3","commandType":1,"key":"ws/u","sessionId":"` + strings.Repeat("a", 32) + `"}`,
	} {
		id := fmt.Sprintf("u%d", i)
		u.send(frame, reqValid)
		if e, _ := u.reply(id, "error", "unsupported")["error"].(map[string]any); e["feature"] != "sessions" {
			t.Errorf("unsupported names feature %v, the docs promise sessions", e["feature"])
		}
	}
}

func testSessionsREST(t *testing.T, s *spec, n *node) {
	r := &restClient{t: t, s: s, n: n, client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	m := r.do("open a session", call{method: "POST", path: "/sessions", body: `{"client_id":"dave","ttl_ms":5000}`, status: 201})
	sid, _ := m["session_id"].(string)
	r.do("open a session without a body", call{method: "POST", path: "/sessions", ctype: "-", status: 201})
	g := r.do("acquire in the session", call{method: "POST", path: "/locks/{key}", key: "rs/a", status: 200,
		body: fmt.Sprintf(`{"session_id":%q}`, sid)})
	if g["session_id"] != sid || g["ttl_ms"] != 5000.0 || g["owner"] != "dave" {
		t.Errorf("a grant in a session: %v", g)
	}
	r.do("acquireAll in the session", call{method: "POST", path: "/locks", status: 200,
		body: fmt.Sprintf(`{"keys":["rs/b","rs/c"],"session_id":%q,"ttl_ms":5000}`, sid)})
	r.do("acquire in the session, another ttl", call{method: "POST", path: "/locks/{key}", key: "rs/d", status: 400, code: "invalid_ttl",
		body: fmt.Sprintf(`{"session_id":%q,"ttl_ms":7000}`, sid)})
	r.do("renew the session", call{method: "POST", path: "/sessions/renew", status: 200, body: fmt.Sprintf(`{"session_id":%q}`, sid)})
	r.do("close the session", call{method: "POST", path: "/sessions/close", status: 204, body: fmt.Sprintf(`{"session_id":%q}`, sid)})
	r.do("a lease of the closed session", call{method: "GET", path: "/locks/{key}", key: "rs/b", status: 404, code: "not_found"})
	r.do("renew, closed", call{method: "POST", path: "/sessions/renew", status: 409, code: "session_expired", body: fmt.Sprintf(`{"session_id":%q}`, sid)})
	r.do("close, closed", call{method: "POST", path: "/sessions/close", status: 409, code: "session_expired", body: fmt.Sprintf(`{"session_id":%q}`, sid)})
	r.do("acquire, closed", call{method: "POST", path: "/locks/{key}", key: "rs/e", status: 409, code: "session_expired", body: fmt.Sprintf(`{"session_id":%q}`, sid)})
	r.do("renew, no id", call{method: "POST", path: "/sessions/renew", status: 400, code: "missing_field", body: `{}`, req: reqInvalid})
	r.do("renew, malformed id", call{method: "POST", path: "/sessions/renew", status: 400, code: "invalid_handle", body: `{"session_id":"x"}`, req: reqInvalid})
	r.do("open, bad ttl", call{method: "POST", path: "/sessions", status: 400, code: "invalid_ttl", body: `{"ttl_ms":5}`, req: reqInvalid})
	r.do("open, unknown field", call{method: "POST", path: "/sessions", status: 400, code: "bad_json", body: `{"sessionId":"x"}`, req: reqInvalid})
	r.raw("sessions, method not allowed", "GET", "http://"+n.leader+"/sessions", 405, "MethodNotAllowed")
	r.do("open, no sessions", call{base: n.bare, method: "POST", path: "/sessions", status: 501, code: "unsupported", body: `{}`})
	r.do("acquire in a session, no sessions", call{base: n.bare, method: "POST", path: "/locks/{key}", key: "rs/u", status: 501, code: "unsupported",
		body: `{"session_id":"` + strings.Repeat("a", 32) + `"}`})
}
