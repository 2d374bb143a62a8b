package gateway

import (
	"slices"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/lock"
)

// TestSessionsUnsupported: a backend without sessions (the reference
// locker) answers every session request unsupported, naming the feature,
// before it sees it — malformed ones included, as for other features —
// and its gateway does not announce "sessions".
func TestSessionsUnsupported(t *testing.T) {
	g, srv := startGateway(t, Options{})
	if g.Features()&lock.FeatureSessions != 0 {
		t.Fatal("the reference locker's gateway offers sessions")
	}
	ws := dial(t, srv)
	id := lock.NewHandle()
	for i, req := range []map[string]any{
		{"commandType": 11},
		{"commandType": 12, "sessionId": id},
		{"commandType": 13, "sessionId": id},
		{"commandType": 12},
		{"commandType": 1, "key": "k", "sessionId": id},
		{"commandType": 5, "key": "k", "sessionId": id},
		{"commandType": 8, "keys": []string{"a", "b"}, "sessionId": id},
	} {
		req["id"] = string(rune('a' + i))
		ws.send(req)
		r := ws.expect(string(rune('a'+i)), "error", "unsupported")
		if r.Error.Feature != "sessions" {
			t.Errorf("%v: feature %q, want sessions", req, r.Error.Feature)
		}
	}
	for _, path := range []string{"/sessions", "/sessions/renew", "/sessions/close"} {
		code, m, h := do(t, "POST", srv.URL+path, "", `{"session_id":"`+id+`"}`)
		if path == "/sessions" {
			code, m, h = do(t, "POST", srv.URL+path, "", `{}`)
		}
		if code != 501 || errCode(m) != "unsupported" {
			t.Errorf("POST %s = %d %v, want 501 unsupported", path, code, m)
		}
		if f := h.Get("Lockgate-Features"); slices.Contains(strings.Split(f, ","), "sessions") {
			t.Errorf("the reference gateway announces %q", f)
		}
	}
	if code, m, _ := do(t, "POST", srv.URL+"/locks/k", "", `{"session_id":"`+id+`"}`); code != 501 || errCode(m) != "unsupported" {
		t.Errorf("POST /locks/k in a session = %d %v, want 501 unsupported", code, m)
	}
}
