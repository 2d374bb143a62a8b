package raftlock

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/raft"
)

// TestDebugClock: a node started with FaultInjection shifts its leader
// clock on POST /v1/debug/clock and refuses malformed or huge offsets; a
// node without it does not serve the endpoint.
func TestDebugClock(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := func(faults bool) *Server {
		cfg := DefaultConfig("1")
		fastConfig(t)(&cfg)
		cfg.DataDir = t.TempDir()
		cfg.Bootstrap = true
		cfg.FaultInjection = faults
		s, err := StartServer(ctx, cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Shutdown() })
		return s
	}
	post := func(s *Server, body string) int {
		resp, err := http.Post("http://"+s.APIAddr()+PathDebugClock, "application/json", strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}

	s := start(true)
	if code := post(s, `{"offsetMs": 5000}`); code != http.StatusOK {
		t.Fatalf("skew: status %d", code)
	}
	if ahead := time.Duration(s.cfg.Clock.Now() - time.Now().UnixNano()); ahead < 4*time.Second || ahead > 6*time.Second {
		t.Fatalf("clock %v ahead after a 5 s skew", ahead)
	}
	for _, bad := range []string{`{"offsetMs": "x"}`, `{"offset": 5}`, `{"offsetMs": 90000000}`, `nope`} {
		if code := post(s, bad); code != http.StatusBadRequest {
			t.Errorf("body %s: status %d, want 400", bad, code)
		}
	}
	if code := post(s, `{"offsetMs": 0}`); code != http.StatusOK {
		t.Fatalf("heal: status %d", code)
	}
	if ahead := time.Duration(s.cfg.Clock.Now() - time.Now().UnixNano()); ahead > time.Second || ahead < -time.Second {
		t.Fatalf("clock %v off after healing", ahead)
	}

	if code := post(start(false), `{"offsetMs": 5000}`); code == http.StatusOK {
		t.Fatal("a node without FaultInjection skewed its clock")
	}
}

// TestPeerDial: the Raft stream dials a peer listed in PeerDial at the
// address given there (a proxy), others directly.
func TestPeerDial(t *testing.T) {
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer proxy.Close()
	direct, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close()
	s, err := newFaultStream("127.0.0.1:0", map[string]string{"10.255.255.1:8081": proxy.Addr().String()}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, tc := range []struct {
		dial string
		ln   net.Listener
	}{
		{"10.255.255.1:8081", proxy},
		{direct.Addr().String(), direct},
	} {
		c, err := s.Dial(raft.ServerAddress(tc.dial), 5*time.Second)
		if err != nil {
			t.Fatalf("dial %s: %v", tc.dial, err)
		}
		tc.ln.(*net.TCPListener).SetDeadline(time.Now().Add(5 * time.Second))
		in, err := tc.ln.Accept()
		if err != nil {
			t.Fatalf("dial %s did not arrive at %s: %v", tc.dial, tc.ln.Addr(), err)
		}
		in.Close()
		c.Close()
	}
}
