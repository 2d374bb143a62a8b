package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/lock"
)

// TestRecoverCommand: `lockgate recover` refuses the data directory of a
// running node and one without state; on the stopped node's directory it
// reports the new configuration and the raised counter, and the node
// started on it leads alone and grants above --token-floor.
func TestRecoverCommand(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "node-1")
	start := func(raftAddr string) *raftlock.Node {
		t.Helper()
		cfg := raftlock.DefaultConfig("1")
		cfg.DataDir, cfg.RaftAddr, cfg.APIAddr, cfg.Bootstrap = dir, raftAddr, "127.0.0.1:0", true
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		n, err := raftlock.New(cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Shutdown() })
		if _, err := raftlock.WaitLeader(ctx, n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	n := start("127.0.0.1:0")
	held, err := n.Acquire(ctx, "held", lock.AcquireOptions{TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := n.RaftAddr()

	code, _, errOut := run(t, "recover", "--data-dir", dir, "--id", "1")
	if code == 0 || !strings.Contains(errOut, "in use") || !strings.Contains(errOut, dir) {
		t.Fatalf("recover on a running node's directory: exit %d, stderr %q; want a refusal naming the directory in use", code, errOut)
	}
	if code, _, errOut := run(t, "recover", "--data-dir", t.TempDir(), "--id", "1"); code == 0 || !strings.Contains(errOut, "no Raft state") {
		t.Errorf("recover on an empty directory: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := run(t, "recover", "--data-dir", dir); code == 0 || !strings.Contains(errOut, `"id" not set`) {
		t.Errorf("recover without --id: exit %d, stderr %q", code, errOut)
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}

	const floor = 5_000_000_000_000_000_000
	code, out, errOut := run(t, "recover", "--data-dir", dir, "--id", "1", "--token-floor", fmt.Sprint(uint64(floor)))
	if code != 0 {
		t.Fatalf("recover: exit %d, stderr %s", code, errOut)
	}
	for _, want := range []string{
		fmt.Sprintf("fencing counter: %d -> %d", held.Token, uint64(floor)),
		"configuration:   1=" + raftAddr + " (was 1=" + raftAddr + ")",
		"lockgate node --id 1 --data-dir " + dir,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("recover output lacks %q:\n%s", want, out)
		}
	}
	n = start(raftAddr)
	lease, err := n.Acquire(ctx, "next", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Token != floor+1 {
		t.Errorf("first token after recover --token-floor %d: %d", uint64(floor), lease.Token)
	}
}
