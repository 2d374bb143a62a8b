package raftgw

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/wire"
)

// startRaft starts a three-node raftlock cluster with a gateway on every
// node's API address.
func startRaft(t *testing.T) *raftlock.LocalCluster {
	t.Helper()
	return startRaftWith(t, gateway.Options{})
}

// startRaftWith is startRaft with the gateways' options.
func startRaftWith(t *testing.T, opts gateway.Options) *raftlock.LocalCluster {
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
	for _, s := range c.Servers {
		Serve(s, opts)
	}
	t.Cleanup(c.Shutdown)
	return c
}

// TestRaftNodesRedirect: every raftlock node serves the gateway; a follower
// answers REST with 307 to the leader and WebSocket with not_leader naming
// it; the leader grants.
func TestRaftNodesRedirect(t *testing.T) {
	c := startRaft(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var f *raftlock.Node
	for _, n := range c.Nodes() {
		if n != l {
			f = n
		}
	}
	// The member directory (leader's API address) commits right after the
	// election; wait until the follower knows it.
	for _, addr := f.Leader(); addr == ""; _, addr = f.Leader() {
		time.Sleep(10 * time.Millisecond)
	}

	code, m, h := do(t, "POST", "http://"+f.APIAddr()+"/locks/x", "", `{"client_id":"a","ttl_ms":5000}`)
	if code != 307 || errCode(m) != "not_leader" || h.Get("Location") != "http://"+l.APIAddr()+"/locks/x" {
		t.Fatalf("follower POST = %d %v Location %q; want 307 to %s", code, m, h.Get("Location"), l.APIAddr())
	}
	code, m, _ = do(t, "POST", "http://"+l.APIAddr()+"/locks/x", "", `{"client_id":"a","ttl_ms":5000}`)
	if code != 200 || m["fencing_token"] == nil {
		t.Fatalf("leader POST = %d %v", code, m)
	}
	code, m, _ = do(t, "POST", "http://"+l.APIAddr()+"/locks/x", "", `{"client_id":"b","ttl_ms":5000}`)
	if code != 409 || errCode(m) != "held" {
		t.Fatalf("second leader POST = %d %v, want 409", code, m)
	}

	ws, _, err := websocket.DefaultDialer.Dial("ws://"+f.APIAddr()+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	r := roundTrip(t, ws, map[string]any{"id": "1", "commandType": 5, "key": "y"})
	if r.ID != "1" || r.Type != "error" || r.Error == nil || r.Error.Code != "not_leader" {
		t.Fatalf("follower WebSocket reply %+v (error %+v), want id 1 error not_leader", r, r.Error)
	}
	if r.Error.Leader == nil || r.Error.Leader.Addr != l.APIAddr() || r.Error.Leader.ID != l.ID() {
		t.Errorf("not_leader names %+v, want %s at %s", r.Error.Leader, l.ID(), l.APIAddr())
	}
	if code, _, _ := doText(t, "http://"+f.APIAddr()+"/readyz"); code != 200 {
		t.Errorf("follower readyz = %d, want 200 (it can redirect)", code)
	}
	if !strings.Contains(f.APIAddr(), "127.0.0.1") {
		t.Errorf("API bound to %s, want loopback", f.APIAddr())
	}
}

// TestRaftMetrics: a node's /metrics carries its Raft metrics beside the
// gateway's: one current Raft state, its peers, and readiness on the
// leader only.
func TestRaftMetrics(t *testing.T) {
	c := startRaft(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := c.Leader(ctx); err != nil {
		t.Fatal(err)
	}
	for _, n := range c.Nodes() {
		before := n.IsLeader()
		code, body, _ := doText(t, "http://"+n.APIAddr()+"/metrics")
		after := n.IsLeader()
		if code != 200 {
			t.Fatalf("node %s /metrics: %d", n.ID(), code)
		}
		states := 0
		for _, st := range []string{"Follower", "Candidate", "Leader"} {
			if strings.Contains(body, `lockgate_raft_state{node="`+n.ID()+`",state="`+st+`"} 1`) {
				states++
			}
		}
		if states != 1 {
			t.Errorf("node %s /metrics reports %d current Raft states, want 1", n.ID(), states)
		}
		if before == after { // (a load spike may move leadership during the scrape)
			ready := map[bool]string{true: "1", false: "0"}[after]
			if want := `lockgate_raft_leader_ready{node="` + n.ID() + `"} ` + ready; !strings.Contains(body, want) {
				t.Errorf("node %s /metrics lacks %q", n.ID(), want)
			}
		}
		for _, want := range []string{
			`lockgate_raft_peers{node="` + n.ID() + `"} 2`,
			"lockgate_grants_total 0",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("node %s /metrics lacks %q", n.ID(), want)
			}
		}
	}
}

// The helpers below are the gateway package's test helpers this file used
// when it lived there (gateway/raft_test.go), cut to what it needs.

// roundTrip sends m on ws and reads the next reply (within 5 s).
func roundTrip(t *testing.T, ws *websocket.Conn, m map[string]any) wire.Reply {
	t.Helper()
	if err := ws.WriteJSON(m); err != nil {
		t.Fatalf("send: %v", err)
	}
	ws.SetReadDeadline(time.Now().Add(5 * time.Second))
	var r wire.Reply
	if err := ws.ReadJSON(&r); err != nil {
		t.Fatalf("recv: %v", err)
	}
	return r
}

// do sends an HTTP request without following redirects and returns the
// status, the decoded JSON body and the headers.
func do(t *testing.T, method, url, contentType, body string) (int, map[string]any, http.Header) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	switch {
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

// errCode is the error code of a decoded REST error body.
func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	s, _ := e["code"].(string)
	return s
}

// doText GETs url and returns the status and the body as text.
func doText(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b), resp.Header
}
