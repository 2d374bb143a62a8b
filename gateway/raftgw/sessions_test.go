package raftgw

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// Sessions through the gateway of a three-node raftlock
// cluster: open, renew and close over WebSocket and REST, acquires in a
// session, a close that releases every lease (a waiter is granted), the
// codes of a session that is gone or malformed, and the per-connection
// limit.

// leaderAPI waits for the leader and returns its API address.
func leaderAPI(t *testing.T, c *raftlock.LocalCluster) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return l.APIAddr()
}

func dialWS(t *testing.T, addr string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	return ws
}

// recvWS reads the next message but "wanted" pushes (within 10 s).
func recvWS(t *testing.T, ws *websocket.Conn) wire.Reply {
	t.Helper()
	for {
		ws.SetReadDeadline(time.Now().Add(10 * time.Second))
		var r wire.Reply
		if err := ws.ReadJSON(&r); err != nil {
			t.Fatalf("recv: %v", err)
		}
		if r.Type != wire.TypeWanted {
			return r
		}
	}
}

// call sends m on ws and reads its answer (recvWS).
func call(t *testing.T, ws *websocket.Conn, m map[string]any) wire.Reply {
	t.Helper()
	if err := ws.WriteJSON(m); err != nil {
		t.Fatalf("send: %v", err)
	}
	return recvWS(t, ws)
}

// want fails unless r has this id, type and error code ("" for none).
func want(t *testing.T, r wire.Reply, id, typ, code string) wire.Reply {
	t.Helper()
	got := ""
	if r.Error != nil {
		got = r.Error.Code
	}
	if r.ID != id || r.Type != typ || got != code {
		t.Fatalf("got id %q type %q code %q (%+v), want id %q type %q code %q", r.ID, r.Type, got, r.Error, id, typ, code)
	}
	return r
}

func TestSessionsWebSocket(t *testing.T) {
	c := startRaft(t)
	addr := leaderAPI(t, c)
	ws := dialWS(t, addr)
	waiter := dialWS(t, addr)

	r := want(t, call(t, ws, map[string]any{"id": "o", "commandType": 11, "ttl": 5000, "clientId": "alice"}), "o", "session", "")
	id := r.SessionID
	if len(id) < 32 || r.TTL != 5000 {
		t.Fatalf("session reply %+v: want a 32+ character sessionId and ttl 5000", r)
	}
	// Acquires in the session: the grant names it and has its TTL.
	g := want(t, call(t, ws, map[string]any{"id": "a", "commandType": 5, "key": "s/a", "sessionId": id}), "a", "grant", "")
	if g.SessionID != id || g.TTL != 5000 || g.Owner != "alice" {
		t.Fatalf("grant %+v: want sessionId %s, ttl 5000, owner alice (the session's)", g, id)
	}
	gs := want(t, call(t, ws, map[string]any{"id": "b", "commandType": 8, "keys": []string{"s/b", "s/c"}, "sessionId": id, "ttl": 5000}), "b", "grants", "")
	for _, l := range gs.Leases {
		if l.SessionID != id || l.TTL != 5000 {
			t.Fatalf("grants lease %+v: want sessionId %s and ttl 5000", l, id)
		}
	}
	want(t, call(t, ws, map[string]any{"id": "t", "commandType": 5, "key": "s/d", "sessionId": id, "ttl": 7000}), "t", "error", "invalid_ttl")
	// Renew (3) of a session lease renews its session.
	want(t, call(t, ws, map[string]any{"id": "r3", "commandType": 3, "key": "s/a", "lockToken": g.LockToken, "fencingToken": g.FencingToken}), "r3", "renewed", "")
	r = want(t, call(t, ws, map[string]any{"id": "r", "commandType": 12, "sessionId": id}), "r", "sessionRenewed", "")
	if r.SessionID != id || r.TTL != 5000 {
		t.Fatalf("sessionRenewed %+v: want sessionId %s, ttl 5000", r, id)
	}

	// Another connection waits for a key of the session; closing the
	// session releases every lease of it, so the waiter is granted.
	if err := waiter.WriteJSON(map[string]any{"id": "w", "commandType": 1, "key": "s/c", "ttl": 5000}); err != nil {
		t.Fatal(err)
	}
	waitForWaiter(t, ws, "s/c")
	want(t, call(t, ws, map[string]any{"id": "c", "commandType": 13, "sessionId": id}), "c", "sessionClosed", "")
	want(t, recvWS(t, waiter), "w", "grant", "")
	for _, key := range []string{"s/a", "s/b"} {
		want(t, call(t, ws, map[string]any{"id": "i", "commandType": 4, "key": key}), "i", "error", "not_found")
	}

	// The session is gone: renew, close and acquire in it answer
	// session_expired; so does a session nobody opened.
	want(t, call(t, ws, map[string]any{"id": "r2", "commandType": 12, "sessionId": id}), "r2", "error", "session_expired")
	want(t, call(t, ws, map[string]any{"id": "c2", "commandType": 13, "sessionId": id}), "c2", "error", "session_expired")
	want(t, call(t, ws, map[string]any{"id": "a2", "commandType": 5, "key": "s/e", "sessionId": id}), "a2", "error", "session_expired")
	want(t, call(t, ws, map[string]any{"id": "u", "commandType": 12, "sessionId": lock.NewHandle()}), "u", "error", "session_expired")
	want(t, call(t, ws, map[string]any{"id": "u2", "commandType": 1, "key": "s/f", "sessionId": lock.NewHandle()}), "u2", "error", "session_expired")

	// Malformed requests are refused before the backend sees them.
	for i, tc := range []struct {
		req  map[string]any
		code string
	}{
		{map[string]any{"commandType": 12}, "missing_field"},
		{map[string]any{"commandType": 13}, "missing_field"},
		{map[string]any{"commandType": 12, "sessionId": "not-a-session"}, "invalid_handle"},
		{map[string]any{"commandType": 13, "sessionId": strings.Repeat("A", 32)}, "invalid_handle"},
		{map[string]any{"commandType": 5, "key": "k", "sessionId": "xyz"}, "invalid_handle"},
		{map[string]any{"commandType": 4, "key": "k", "sessionId": lock.NewHandle()}, "bad_json"},
		{map[string]any{"commandType": 11, "ttl": -1}, "invalid_ttl"},
		{map[string]any{"commandType": 11, "ttl": 5}, "invalid_ttl"},
		{map[string]any{"commandType": 11, "clientId": strings.Repeat("o", 200)}, "invalid_owner"},
	} {
		tc.req["id"] = fmt.Sprint("m", i)
		want(t, call(t, ws, tc.req), fmt.Sprint("m", i), "error", tc.code)
	}
	// An open without ttl gets the default.
	r = want(t, call(t, ws, map[string]any{"id": "d", "commandType": 11}), "d", "session", "")
	if r.TTL != lock.DefaultSessionTTL.Milliseconds() {
		t.Errorf("default session ttl %d, want %d", r.TTL, lock.DefaultSessionTTL.Milliseconds())
	}
}

// waitForWaiter inspects key through ws until it shows a waiter.
func waitForWaiter(t *testing.T, ws *websocket.Conn, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r := call(t, ws, map[string]any{"id": "q", "commandType": 4, "key": key})
		if r.Waiters != nil && *r.Waiters > 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s shows no waiter: %+v", key, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestSessionsREST(t *testing.T) {
	c := startRaft(t)
	base := "http://" + leaderAPI(t, c)
	code, m, _ := do(t, "POST", base+"/sessions", "", `{"client_id":"bob","ttl_ms":4000}`)
	id, _ := m["session_id"].(string)
	if code != 201 || len(id) < 32 || m["ttl_ms"] != 4000.0 {
		t.Fatalf("POST /sessions = %d %v", code, m)
	}
	code, m, _ = do(t, "POST", base+"/locks/r-a", "", `{"session_id":"`+id+`"}`)
	if code != 200 || m["session_id"] != id || m["ttl_ms"] != 4000.0 || m["owner"] != "bob" {
		t.Fatalf("POST /locks/r-a in the session = %d %v", code, m)
	}
	code, m, _ = do(t, "POST", base+"/locks", "", `{"keys":["r-b","r-c"],"session_id":"`+id+`"}`)
	if code != 200 {
		t.Fatalf("POST /locks in the session = %d %v", code, m)
	}
	code, m, _ = do(t, "POST", base+"/sessions/renew", "", `{"session_id":"`+id+`"}`)
	if code != 200 || m["session_id"] != id || m["ttl_ms"] != 4000.0 {
		t.Fatalf("POST /sessions/renew = %d %v", code, m)
	}
	if code, m, _ = do(t, "POST", base+"/sessions/close", "", `{"session_id":"`+id+`"}`); code != 204 {
		t.Fatalf("POST /sessions/close = %d %v", code, m)
	}
	if code, m, _ = do(t, "GET", base+"/locks/r-b", "", ""); code != 404 {
		t.Fatalf("a lease of the closed session: GET = %d %v, want 404", code, m)
	}
	for _, tc := range []struct {
		method, path, body string
		status             int
		code               string
	}{
		{"POST", "/sessions/renew", `{"session_id":"` + id + `"}`, 409, "session_expired"},
		{"POST", "/sessions/close", `{"session_id":"` + id + `"}`, 409, "session_expired"},
		{"POST", "/locks/r-d", `{"session_id":"` + id + `"}`, 409, "session_expired"},
		{"POST", "/sessions/renew", `{}`, 400, "missing_field"},
		{"POST", "/sessions/renew", `{"session_id":"../x"}`, 400, "invalid_handle"},
		{"POST", "/sessions", `{"ttl_ms":-5}`, 400, "invalid_ttl"},
		{"POST", "/sessions", `{"sessionId":"x"}`, 400, "bad_json"},
		{"GET", "/sessions", ``, 405, "method_not_allowed"},
		{"DELETE", "/sessions/close", ``, 405, "method_not_allowed"},
	} {
		code, m, _ := do(t, tc.method, base+tc.path, "", tc.body)
		if code != tc.status || errCode(m) != tc.code {
			t.Errorf("%s %s %s = %d %v, want %d %s", tc.method, tc.path, tc.body, code, m, tc.status, tc.code)
		}
	}
}

// TestSessionsPerConnection: a connection opens at most
// MaxSessionsPerConn sessions; closing one frees its place; another
// connection has a count of its own.
func TestSessionsPerConnection(t *testing.T) {
	c := startRaftWith(t, gateway.Options{MaxSessionsPerConn: 2})
	addr := leaderAPI(t, c)
	ws := dialWS(t, addr)
	var ids []string
	for i := range 2 {
		r := want(t, call(t, ws, map[string]any{"id": fmt.Sprint(i), "commandType": 11}), fmt.Sprint(i), "session", "")
		ids = append(ids, r.SessionID)
	}
	want(t, call(t, ws, map[string]any{"id": "x", "commandType": 11}), "x", "error", "too_many_sessions")
	want(t, call(t, dialWS(t, addr), map[string]any{"id": "y", "commandType": 11}), "y", "session", "")
	want(t, call(t, ws, map[string]any{"id": "c", "commandType": 13, "sessionId": ids[0]}), "c", "sessionClosed", "")
	want(t, call(t, ws, map[string]any{"id": "z", "commandType": 11}), "z", "session", "")
}

// TestSessionAfterLeaderChange: a session opened through one leader's
// gateway is renewed and used through the next leader's, which has not
// seen it (it adopts it by one keep-alive); its leases survive.
func TestSessionAfterLeaderChange(t *testing.T) {
	c := startRaft(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	old, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws := dialWS(t, old.APIAddr())
	r := want(t, call(t, ws, map[string]any{"id": "o", "commandType": 11, "ttl": 10000}), "o", "session", "")
	id := r.SessionID
	g := want(t, call(t, ws, map[string]any{"id": "a", "commandType": 5, "key": "lc/a", "sessionId": id}), "a", "grant", "")
	ws.Close()
	for i, s := range c.Servers {
		if s != nil && s.Node == old {
			s.Shutdown()
			c.Servers[i] = nil // gone: Nodes and the cleanup skip it
		}
	}
	var nl *raftlock.Node
	for nl == nil || nl == old {
		if nl, err = c.Leader(ctx); err != nil {
			t.Fatal(err)
		}
		if nl == old {
			time.Sleep(20 * time.Millisecond)
		}
	}
	ws2 := dialWS(t, nl.APIAddr())
	var rr wire.Reply
	for { // the new leader may not be ready for a moment
		rr = call(t, ws2, map[string]any{"id": "r", "commandType": 12, "sessionId": id, "ttl": 10000})
		if rr.Error == nil || (rr.Error.Code != "unavailable" && rr.Error.Code != "not_leader") {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	want(t, rr, "r", "sessionRenewed", "")
	info := want(t, call(t, ws2, map[string]any{"id": "i", "commandType": 4, "key": "lc/a"}), "i", "info", "")
	if info.FencingToken == nil || info.FencingToken.Value != g.FencingToken.Value {
		t.Fatalf("after the leader change lc/a is %+v, want the session's lease (token %d)", info, g.FencingToken.Value)
	}
	g2 := want(t, call(t, ws2, map[string]any{"id": "b", "commandType": 5, "key": "lc/b", "sessionId": id, "ttl": 10000}), "b", "grant", "")
	if g2.SessionID != id {
		t.Fatalf("grant %+v not in the session", g2)
	}
	want(t, call(t, ws2, map[string]any{"id": "c", "commandType": 13, "sessionId": id}), "c", "sessionClosed", "")
	want(t, call(t, ws2, map[string]any{"id": "i2", "commandType": 4, "key": "lc/a"}), "i2", "error", "not_found")
}

// TestSessionsThroughADowngrade: once a format downgrade stops offering
// sessions, a new session and an acquire in one are refused unsupported
// (and the Features header no longer lists sessions), but the keep-alive
// and the close of a session that exists pass: refusing them would lose
// its leases.
func TestSessionsThroughADowngrade(t *testing.T) {
	c := startRaft(t)
	addr := leaderAPI(t, c)
	ws := dialWS(t, addr)
	r := want(t, call(t, ws, map[string]any{"id": "o", "commandType": 11, "ttl": 5000, "clientId": "alice"}), "o", "session", "")
	id := r.SessionID
	want(t, call(t, ws, map[string]any{"id": "a", "commandType": 5, "key": "d/a", "sessionId": id}), "a", "grant", "")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	rep, err := (&raftlock.MembershipClient{}).ChangeFormat(ctx, addr, raftlock.FormatArgs{DowngradeTo: 1, WaitMs: 100})
	if err != nil || rep.Done || rep.Gate.Offer != 1 {
		t.Fatalf("downgrade with a session lease alive: %+v, %v; want draining at offer 1", rep, err)
	}
	if _, _, h := doText(t, "http://"+addr+"/healthz"); strings.Contains(h.Get(wire.FeaturesHeader), "sessions") {
		t.Errorf("Lockgate-Features %q lists sessions while a downgrade drains them", h.Get(wire.FeaturesHeader))
	}
	want(t, call(t, ws, map[string]any{"id": "o2", "commandType": 11, "ttl": 5000}), "o2", "error", "unsupported")
	want(t, call(t, ws, map[string]any{"id": "a2", "commandType": 5, "key": "d/b", "sessionId": id}), "a2", "error", "unsupported")
	want(t, call(t, ws, map[string]any{"id": "r", "commandType": 12, "sessionId": id}), "r", "sessionRenewed", "")
	want(t, call(t, ws, map[string]any{"id": "c", "commandType": 13, "sessionId": id}), "c", "sessionClosed", "")
}
