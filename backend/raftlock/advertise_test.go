package raftlock

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// TestRaftAdvertiseValidation: a wildcard bind needs an address peers can
// dial, and the advertised address must be one. (InsecureNoPeerAuth
// passes the peer-authentication check, which comes first:
// TestPeerAuthRequired.)
func TestRaftAdvertiseValidation(t *testing.T) {
	for _, tc := range []struct{ bind, advertise, want string }{
		{"0.0.0.0:8081", "", "RaftAdvertise"},
		{"[::]:8081", "", "RaftAdvertise"},
		{":8081", "", "RaftAdvertise"},
		{"0.0.0.0:8081", "0.0.0.0:8081", "wildcard"},
		{"0.0.0.0:8081", "raft1", "RaftAdvertise"},
		{"0.0.0.0:8081", "raft1:0", "port"},
		{"0.0.0.0:8081", "raft1:http", "port"},
	} {
		cfg := DefaultConfig("1")
		cfg.DataDir = t.TempDir()
		cfg.RaftAddr, cfg.RaftAdvertise = tc.bind, tc.advertise
		cfg.InsecureNoPeerAuth = true
		cfg.fill()
		err := cfg.Validate()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("bind %q advertise %q: %v, want an error about %s", tc.bind, tc.advertise, err, tc.want)
		}
	}
	cfg := DefaultConfig("1")
	cfg.DataDir = t.TempDir()
	cfg.RaftAddr, cfg.RaftAdvertise = "0.0.0.0:8081", "raft1.example:8081"
	cfg.InsecureNoPeerAuth = true
	cfg.fill()
	if err := cfg.Validate(); err != nil {
		t.Errorf("a wildcard bind advertising a name: %v", err)
	}
}

// TestRaftAdvertise: nodes that advertise a host name instead of the
// address they bind are known by that name in the Raft configuration, and
// replicate through it (the leader dials its followers by name).
func TestRaftAdvertise(t *testing.T) {
	ports := map[string]string{}
	c := startCluster(t, 3, func(cfg *Config) {
		p := freePort(t)
		ports[cfg.ID] = p
		cfg.RaftAddr = "127.0.0.1:" + p
		cfg.RaftAdvertise = "localhost:" + p
	})
	l := leader(t, c)
	cf := l.Raft().GetConfiguration()
	if err := cf.Error(); err != nil {
		t.Fatal(err)
	}
	if got := len(cf.Configuration().Servers); got != 3 {
		t.Fatalf("%d servers in the configuration, want 3", got)
	}
	for _, s := range cf.Configuration().Servers {
		if want := "localhost:" + ports[string(s.ID)]; string(s.Address) != want {
			t.Errorf("server %s known as %q, want its advertised %q", s.ID, s.Address, want)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := l.Acquire(ctx, "advertised", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range followers(c, l) {
		deadline := time.Now().Add(20 * time.Second)
		for f.fsm.LastToken() < uint64(g.Token) {
			if time.Now().After(deadline) {
				t.Fatalf("follower %s never received the grant (last token %d, want %d)", f.ID(), f.fsm.LastToken(), g.Token)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
}
