package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestSnapshotCommands: `snapshot save` takes a backup through a
// follower with an admin token (and is refused without one), writes it
// atomically and prints its header; `snapshot inspect` verifies it (text
// and --json) and fails, saying why, on a flipped byte, a truncation and
// a file that is not a backup; `snapshot restore` writes three members'
// directories of a new cluster (refusing a non-empty directory and a
// corrupt backup), and three `lockgate node` processes started on them
// without --bootstrap or --join form the cluster and grant a token above
// every token of the original cluster.
func TestSnapshotCommands(t *testing.T) {
	defer slog.SetDefault(slog.Default())
	const admin = "cli-admin-token-0123456789"
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	admins, err := gateway.NewTokens(admin)
	if err != nil {
		t.Fatal(err)
	}
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = time.Second, time.Second, time.Second
		cfg.AdminTokens, cfg.MembershipToken = admins, admin
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Shutdown()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var follower *raftlock.Node
	for _, n := range c.Nodes() {
		if n != l {
			follower = n
		}
	}
	// The follower learns the leader's API address from the replicated
	// member directory.
	for _, addr := follower.Leader(); addr != l.APIAddr(); _, addr = follower.Leader() {
		if ctx.Err() != nil {
			t.Fatalf("follower %s never learned the leader's API address", follower.ID())
		}
		time.Sleep(5 * time.Millisecond)
	}
	locker := c.Locker()
	defer locker.Close()
	if _, err := locker.Acquire(ctx, "held", lock.AcquireOptions{TTL: time.Minute}); err != nil {
		t.Fatal(err)
	}

	dir := t.TempDir()
	f := func(name string) string { return filepath.Join(dir, name) }
	if err := os.WriteFile(f("admin"), []byte("# admin\n"+admin+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "snapshot", "save", "--endpoints", follower.APIAddr(), f("b.backup")); code == 0 || !strings.Contains(errOut, "401") {
		t.Fatalf("save without a credential: exit %d, %q; want a 401", code, errOut)
	}
	code, out, errOut := run(t, "snapshot", "save", "--endpoints", follower.APIAddr(), "--admin-token-file", f("admin"), f("b.backup"))
	if code != 0 {
		t.Fatalf("save: exit %d: %s", code, errOut)
	}
	for _, want := range []string{"saved a backup from the leader at " + l.APIAddr(), "verified", "leases:", "by leader " + l.ID()} {
		if !strings.Contains(out, want) {
			t.Errorf("save output lacks %q:\n%s", want, out)
		}
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 2 {
		t.Errorf("save left %d files in its directory, want admin and b.backup: %v", len(ents), ents)
	}

	code, out, errOut = run(t, "snapshot", "inspect", f("b.backup"))
	if code != 0 || !strings.Contains(out, "verified") || !strings.Contains(out, "fencing counter:") {
		t.Fatalf("inspect: exit %d, %s%s", code, out, errOut)
	}
	code, out, _ = run(t, "snapshot", "inspect", "--json", f("b.backup"))
	var js backupJSON
	if err := json.Unmarshal([]byte(out), &js); code != 0 || err != nil || !js.Verified || js.Header.Leases != 1 || js.Header.Members != 3 || len(js.MemberDirectory) != 3 {
		t.Fatalf("inspect --json: exit %d, %v, %+v", code, err, js)
	}
	good, _ := os.ReadFile(f("b.backup"))
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x01
	for name, tc := range map[string]struct {
		data []byte
		want string
	}{
		"flipped":   {flipped, "checksum mismatch"},
		"truncated": {good[:len(good)-10], "truncated"},
		"not one":   {[]byte("hello, world: not a backup at all"), "bad magic"},
	} {
		if err := os.WriteFile(f(name), tc.data, 0o600); err != nil {
			t.Fatal(err)
		}
		if code, _, errOut := run(t, "snapshot", "inspect", f(name)); code == 0 || !strings.Contains(errOut, tc.want) {
			t.Errorf("inspect %s: exit %d, stderr %q; want %q", name, code, errOut, tc.want)
		}
	}

	// The original cluster grants on after the backup, then goes away.
	var last lock.Token
	for _, k := range []string{"a", "b", "c"} {
		lease, err := locker.TryAcquire(ctx, k, lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		last = lease.Token
	}
	c.Shutdown()

	ids := []string{"n2", "n1", "n3"}
	var spec, apis []string
	raftAddrs := map[string]string{}
	for _, id := range ids {
		raftAddrs[id] = freeAddr(t)
		apis = append(apis, freeAddr(t))
		spec = append(spec, id+"="+raftAddrs[id]+"="+apis[len(apis)-1])
	}
	members := strings.Join(spec, ",")
	if code, _, errOut := run(t, "snapshot", "restore", f("flipped"), "--data-dir", f("x"), "--id", "n1", "--members", members); code == 0 || !strings.Contains(errOut, "checksum mismatch") {
		t.Errorf("restore of a corrupt backup: exit %d, %q", code, errOut)
	}
	if _, err := os.Stat(f("x")); !os.IsNotExist(err) {
		t.Errorf("the refused restore created its data directory: %v", err)
	}
	for _, id := range ids {
		code, out, errOut := run(t, "snapshot", "restore", f("b.backup"), "--data-dir", f(id), "--id", id, "--members", members)
		want := "receives the restored state from member n1"
		if id == "n1" {
			want = "this member is the seed"
		}
		if code != 0 || !strings.Contains(out, want) || !strings.Contains(out, "next: lockgate node --id "+id) {
			t.Fatalf("restore %s: exit %d, %s%s; want %q", id, code, out, errOut, want)
		}
	}
	if code, _, errOut := run(t, "snapshot", "restore", f("b.backup"), "--data-dir", f("n1"), "--id", "n1", "--members", members); code == 0 || !strings.Contains(errOut, "not empty") {
		t.Errorf("restore into a restored directory: exit %d, %q", code, errOut)
	}

	if testing.Short() {
		t.Skip("starting the restored cluster builds and runs lockgate")
	}
	bin := testenv.BuildLockgate(t)
	for i, id := range ids {
		startProcess(t, bin, "raftlock node "+id+":", "node", "--id", id, "--data-dir", f(id),
			"--raft-addr", raftAddrs[id], "--api-addr", apis[i])
	}
	sdk, err := client.New(apis, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer sdk.Close()
	lease, err := sdk.Acquire(ctx, "held", lock.AcquireOptions{TTL: time.Minute}) // its lease was dropped
	if err != nil {
		t.Fatalf("acquire on the restored cluster: %v", err)
	}
	if lease.Token <= last {
		t.Fatalf("restored cluster granted token %d, not above %d, the last token before the restore", lease.Token, last)
	}
}
