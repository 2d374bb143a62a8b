package cli

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// holdDefaultPorts makes sure the default ports of node 1 (Raft 8081, API
// 50051) are taken while the test runs: by this test, or already by
// someone else (a `lockgate node --id 1`, another suite).
func holdDefaultPorts(t *testing.T) {
	t.Helper()
	for _, port := range []int{raftlock.DefaultRaftPortBase + 1, raftlock.DefaultAPIPortBase + 1} {
		if ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))); err == nil {
			t.Cleanup(func() { ln.Close() })
		}
	}
}

// TestServeLimitsNoFixedPorts: `lockgate serve` starts while the default
// node ports are taken and beside a second serve (its embedded nodes take
// free ports; before, both bound 8081 and 50051), comes back on the same
// addresses when restarted from its data directory, and a restart whose
// recorded port is taken exits with the cause instead of hanging.
func TestServeLimitsNoFixedPorts(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockgate")
	}
	holdDefaultPorts(t)
	bin := testenv.BuildLockgate(t)
	dir := t.TempDir()
	dataDir := filepath.Join(dir, "data")
	serve := func(t *testing.T, data string) string {
		return startServe(t, bin, []string{"serve", "--nodes", "3", "--listen", "127.0.0.1:0", "--data-dir", data})
	}
	var first map[string]nodeAddrs
	t.Run("two serves beside each other", func(t *testing.T) {
		a := serve(t, dataDir)
		b := serve(t, filepath.Join(dir, "other"))
		for _, addr := range []string{a, b} {
			useGateway(t, addr)
		}
		first = readServeAddrs(t, dataDir)
		if len(first) != 3 {
			t.Fatalf("%s holds %d nodes, want 3", servePortsFile, len(first))
		}
		other := readServeAddrs(t, filepath.Join(dir, "other"))
		for id, a := range first {
			if a.Raft == other[id].Raft || a.API == other[id].API {
				t.Errorf("node %s of both serves on one address: %+v, %+v", id, a, other[id])
			}
		}
	})
	if t.Failed() {
		return
	}
	t.Run("restart on the recorded addresses", func(t *testing.T) {
		useGateway(t, serve(t, dataDir))
		if got := readServeAddrs(t, dataDir); !equalAddrs(got, first) {
			t.Errorf("restarted on %v, want %v", got, first)
		}
	})
	t.Run("restart with a recorded port taken", func(t *testing.T) {
		ln, err := net.Listen("tcp", first["2"].API)
		if err != nil {
			t.Skipf("cannot take %s for the test: %v", first["2"].API, err)
		}
		defer ln.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, "serve", "--nodes", "3", "--listen", "127.0.0.1:0", "--data-dir", dataDir)
		out, err := cmd.CombinedOutput()
		if ctx.Err() != nil {
			t.Fatalf("serve with a taken port did not exit within 60 s:\n%s", out)
		}
		if err == nil || !strings.Contains(string(out), "address already in use") {
			t.Fatalf("serve with %s taken: %v\n%s", first["2"].API, err, out)
		}
	})
}

// useGateway takes and releases a lock through the gateway at addr.
func useGateway(t *testing.T, addr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := client.New([]string{addr}, client.Options{ClientID: "ports"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	l, err := c.Acquire(ctx, "ports", lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("acquire through %s: %v", addr, err)
	}
	if err := c.Release(ctx, l); err != nil {
		t.Fatalf("release through %s: %v", addr, err)
	}
}

func readServeAddrs(t *testing.T, dataDir string) map[string]nodeAddrs {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dataDir, servePortsFile))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]nodeAddrs
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func equalAddrs(a, b map[string]nodeAddrs) bool {
	if len(a) != len(b) {
		return false
	}
	for id, x := range a {
		if b[id] != x {
			return false
		}
	}
	return true
}
