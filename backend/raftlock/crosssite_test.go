package raftlock

import (
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/hashicorp/raft"
)

// TestMembershipRefusesCrossSite: an open loopback node (no tokens: anyone
// who reaches it may change the membership) refuses every request a page
// of another origin can make a browser send — a text/plain or form-encoded
// body, a foreign Origin, Sec-Fetch-Site cross-site — and bodies that are
// not exactly one JSON object; the member is still there. The node's own
// page, and programs, still may.
func TestMembershipRefusesCrossSite(t *testing.T) {
	c := startCluster(t, 2)
	l := leader(t, c)
	var victim string // the member the requests try to remove
	for _, n := range c.Nodes() {
		if n != l {
			victim = n.ID()
		}
	}
	requireMember(t, l, victim)
	base := "http://" + l.APIAddr()
	remove := `{"serverId":"` + victim + `"}`
	for _, tc := range []struct {
		name, path, body string
		hdr              []string
		status           int
	}{
		{"text/plain form", PathRemove, remove, []string{"Content-Type", "text/plain"}, 415},
		{"text/plain form from a page", PathRemove, remove, []string{"Content-Type", "text/plain", "Origin", "http://127.0.0.1:1"}, 403},
		{"form-encoded (curl -d)", PathRemove, remove, []string{"Content-Type", "application/x-www-form-urlencoded"}, 415},
		{"no Content-Type", PathRemove, remove, nil, 415},
		{"JSON from another origin", PathRemove, remove, []string{"Content-Type", "application/json", "Origin", "https://evil.example"}, 403},
		{"JSON, cross-site without Origin", PathRemove, remove, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site"}, 403},
		{"trailing data", PathRemove, remove + `{"serverId":"x"}`, []string{"Content-Type", "application/json"}, 400},
		{"trailing garbage", PathRemove, remove + "x", []string{"Content-Type", "application/json"}, 400},
		{"null", PathRemove, "null", []string{"Content-Type", "application/json"}, 400},
		{"an array", PathJoin, `[1]`, []string{"Content-Type", "application/json"}, 400},
		{"format with trailing data", PathFormat, `{"resume":true}]`, []string{"Content-Type", "application/json"}, 400},
		{"snapshot from a page", PathSnapshot, "", []string{"Origin", "http://localhost:" + strings.Split(l.APIAddr(), ":")[1]}, 403},
		{"empty form to snapshot", PathSnapshot, "", []string{"Content-Type", "text/plain"}, 415},
		{"gc from a page", PathGC, "", []string{"Origin", "null"}, 403},
	} {
		status, body := postRaw(t, base+tc.path, tc.body, tc.hdr...)
		if status != tc.status {
			t.Errorf("%s: %d %s, want %d", tc.name, status, body, tc.status)
		}
	}
	requireMember(t, l, victim)
	// The node's own page and a program are served.
	if status, body := postRaw(t, base+PathSnapshot, "", "Origin", base); status != 200 {
		t.Errorf("snapshot from the node's own origin: %d %s, want 200", status, body)
	}
	if status, body := postRaw(t, base+PathGC, ""); status != 200 {
		t.Errorf("bodiless gc from a program: %d %s, want 200", status, body)
	}
	if status, body := postRaw(t, base+PathJoin, `{"serverId":""}`+"\n", "Content-Type", "application/json; charset=utf-8"); status != 400 || !strings.Contains(body, "serverId, serverAddr and apiAddr are required") {
		t.Errorf("JSON join with a charset and a final newline: %d %s, want it decoded (400 for the missing fields)", status, body)
	}
}

func postRaw(t *testing.T, url, body string, hdr ...string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b))
}

// requireMember fails t unless id is in l's Raft configuration.
func requireMember(t *testing.T, l *Node, id string) {
	t.Helper()
	f := l.Raft().GetConfiguration()
	if err := f.Error(); err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(f.Configuration().Servers, func(s raft.Server) bool { return s.ID == raft.ServerID(id) }) {
		t.Fatalf("member %s is gone: the configuration is %+v", id, f.Configuration().Servers)
	}
}
