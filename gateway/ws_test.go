package gateway

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func TestWSAcquireQueueAndHandoff(t *testing.T) {
	_, srv := startGateway(t, Options{})
	a, b := dial(t, srv), dial(t, srv)

	a.send(map[string]any{"id": "a1", "commandType": 1, "key": "k", "clientId": "alice", "ttl": 60000, "value": "v"})
	g := a.expect("a1", "grant", "")
	if !g.Success || g.FencingToken == nil || g.FencingToken.Key != "k" || g.LockToken == "" || g.TTL != 60000 || g.Owner != "alice" {
		t.Fatalf("grant = %+v", g)
	}
	// Try-acquire by another client names the holder.
	b.send(map[string]any{"id": "b1", "commandType": 5, "key": "k", "clientId": "bob"})
	e := b.expect("b1", "error", "held")
	if e.Error.Holder == nil || e.Error.Holder.Owner != "alice" || e.Error.Holder.FencingToken == nil || *e.Error.Holder.FencingToken != *g.FencingToken {
		t.Errorf("held error names %+v, want alice with token %d", e.Error.Holder, g.FencingToken.Value)
	}
	// A waiting acquire is granted, pushed, when alice releases.
	b.send(map[string]any{"id": "b2", "commandType": 1, "key": "k", "clientId": "bob"})
	// Alice hears that bob waits for her lock (the try-acquire did not count).
	w := a.expect("", "wanted", "")
	if w.Key != "k" || w.LockToken != g.LockToken || w.FencingToken == nil || w.FencingToken.Value != g.FencingToken.Value {
		t.Errorf("wanted push %+v does not name alice's lease %+v", w, g)
	}
	b.quiet(100 * time.Millisecond)
	a.send(map[string]any{"id": "i1", "commandType": 4, "key": "k"})
	info := a.expect("i1", "info", "")
	if info.Owner != "alice" || info.Value == nil || *info.Value != "v" || info.Waiters == nil || *info.Waiters != 1 {
		t.Errorf("inspect = %+v", info)
	}
	a.send(map[string]any{"id": "a2", "commandType": 2, "key": "k", "lockToken": g.LockToken, "fencingToken": g.FencingToken})
	a.quiet(100 * time.Millisecond) // release is silent on success
	g2 := b.expect("b2", "grant", "")
	if g2.FencingToken.Value <= g.FencingToken.Value {
		t.Errorf("token %d after %d", g2.FencingToken.Value, g.FencingToken.Value)
	}
	if g2.TTL != 20000 {
		t.Errorf("default TTL %d ms, want 20000", g2.TTL)
	}
	// Alice's stale release fails, and says so.
	a.send(map[string]any{"id": "a3", "commandType": 2, "key": "k", "lockToken": g.LockToken, "fencingToken": g.FencingToken})
	a.expect("a3", "error", "not_held")
	// Renew and an acknowledged release by bob.
	b.send(map[string]any{"id": "b3", "commandType": 3, "key": "k", "lockToken": g2.LockToken, "fencingToken": g2.FencingToken, "ttl": 30000})
	if r := b.expect("b3", "renewed", ""); r.TTL != 30000 {
		t.Errorf("renewed TTL %d", r.TTL)
	}
	b.send(map[string]any{"id": "b4", "commandType": 2, "key": "k", "lockToken": g2.LockToken, "fencingToken": g2.FencingToken, "ack": true})
	b.expect("b4", "released", "")
	b.send(map[string]any{"id": "b5", "commandType": 4, "key": "k"})
	b.expect("b5", "error", "not_found")
}

func TestWSCancel(t *testing.T) {
	_, srv := startGateway(t, Options{})
	a, b := dial(t, srv), dial(t, srv)
	a.send(map[string]any{"id": "a1", "commandType": 1, "key": "k", "ttl": 60000})
	a.expect("a1", "grant", "")
	b.send(map[string]any{"id": "w", "commandType": 1, "key": "k"})
	b.send(map[string]any{"id": "c", "commandType": 6, "target": "w"})
	first, second := b.recv(), b.recv()
	if first.ID == "w" {
		first, second = second, first
	}
	if first.ID != "c" || first.Type != "cancelled" || second.ID != "w" || second.Error == nil || second.Error.Code != "cancelled" {
		t.Fatalf("cancel replies %+v and %+v", first, second)
	}
	b.send(map[string]any{"id": "c2", "commandType": 6, "target": "w"})
	b.expect("c2", "error", "not_found")
	b.send(map[string]any{"id": "c3", "commandType": 6})
	b.expect("c3", "error", "missing_field")
}

// TestWSBadInput: one test per error code of bad input; the connection
// stays usable after each.
func TestWSBadInput(t *testing.T) {
	_, srv := startGateway(t, Options{MaxWaitersPerConn: 2})
	c := dial(t, srv)
	for _, tc := range []struct{ frame, id, code string }{
		{`{not json`, "", "bad_json"},
		{`[1,2]`, "", "bad_json"},
		{`{"id": "` + strings.Repeat("x", 65) + `", "commandType": 4, "key": "k"}`, strings.Repeat("x", 65), "bad_json"},
		{`{"id": "u1"}`, "u1", "unknown_command"},
		{`{"id": "u2", "commandType": 99}`, "u2", "unknown_command"},
		{`{"id": "m1", "commandType": 1}`, "m1", "missing_field"},
		{`{"id": "m2", "commandType": 2, "key": "k"}`, "m2", "missing_field"},
		{`{"id": "m3", "commandType": 3, "key": "k", "lockToken": "x"}`, "m3", "missing_field"},
		{`{"id": "k1", "commandType": 5, "key": "a\u0000b"}`, "k1", "invalid_key"},
		{`{"id": "k2", "commandType": 5, "key": "` + strings.Repeat("k", 257) + `"}`, "k2", "invalid_key"},
		{`{"id": "t1", "commandType": 5, "key": "k", "ttl": -5}`, "t1", "invalid_ttl"},
		{`{"id": "t2", "commandType": 5, "key": "k", "ttl": 5}`, "t2", "invalid_ttl"},
		{`{"id": "t3", "commandType": 5, "key": "k", "ttl": 90000000}`, "t3", "invalid_ttl"},
		{`{"id": "v1", "commandType": 5, "key": "k", "value": "` + strings.Repeat("v", 4097) + `"}`, "v1", "invalid_value"},
		{`{"id": "o1", "commandType": 5, "key": "k", "clientId": "` + strings.Repeat("o", 129) + `"}`, "o1", "invalid_owner"},
		{`{"id": "h1", "commandType": 5, "key": "k", "lockToken": "nothex"}`, "h1", "invalid_handle"},
	} {
		c.sendRaw(tc.frame)
		c.expect(tc.id, "error", tc.code)
	}
	// Too many waiters on one connection.
	c.send(map[string]any{"id": "g", "commandType": 1, "key": "busy", "ttl": 60000})
	c.expect("g", "grant", "")
	for i := range 2 {
		c.send(map[string]any{"id": fmt.Sprint("w", i), "commandType": 1, "key": "busy"})
		if i == 0 {
			c.expect("", "wanted", "") // its own lease is wanted: locks are not re-entrant
		}
	}
	c.send(map[string]any{"id": "w2", "commandType": 1, "key": "busy"})
	c.expect("w2", "error", "too_many_waiters")
	// Still usable.
	c.send(map[string]any{"id": "ok", "commandType": 5, "key": "free", "ttl": 1000})
	c.expect("ok", "grant", "")
}

// TestWSOversizeFrameClosesConnection: a frame over the limit is answered
// too_large, then the connection closes with 1009 and a reason (protocol
// v1: the client learns why its pending requests will get no answer).
func TestWSOversizeFrameClosesConnection(t *testing.T) {
	_, srv := startGateway(t, Options{MaxMessageBytes: 1024})
	c := dial(t, srv)
	c.sendRaw(`{"id": "x", "commandType": 4, "key": "` + strings.Repeat("k", 2000) + `"}`)
	c.expect("", "error", "too_large")
	c.ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	_, _, err := c.ws.ReadMessage()
	var ce *websocket.CloseError
	if !errors.As(err, &ce) || ce.Code != websocket.CloseMessageTooBig || ce.Text == "" {
		t.Fatalf("after an oversize frame: %v, want close 1009 with a reason", err)
	}
}

// TestWSDisconnect: a dropped connection keeps its leases until their TTL,
// unless the client asked for release on disconnect; its waits are
// cancelled.
func TestWSDisconnect(t *testing.T) {
	_, srv := startGateway(t, Options{})
	a := dial(t, srv)
	a.send(map[string]any{"id": "1", "commandType": 1, "key": "kept", "ttl": 60000})
	a.expect("1", "grant", "")
	a.send(map[string]any{"id": "2", "commandType": 1, "key": "dropped", "ttl": 60000, "releaseOnDisconnect": true})
	a.expect("2", "grant", "")
	a.ws.Close()

	b := dial(t, srv)
	deadline := time.Now().Add(5 * time.Second)
	for {
		b.send(map[string]any{"id": "t", "commandType": 5, "key": "dropped", "ttl": 1000})
		if r := b.recv(); r.Type == "grant" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("a release-on-disconnect lease was not released")
		}
		time.Sleep(10 * time.Millisecond)
	}
	b.send(map[string]any{"id": "k", "commandType": 5, "key": "kept", "ttl": 1000})
	b.expect("k", "error", "held")
}
