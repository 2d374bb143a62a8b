package raftlock

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
)

// startSingle starts a one-node cluster on dataDir (bootstrapping it the
// first time) and waits until it leads.
func startSingle(t *testing.T, dataDir, raftAddr string, configure ...func(*Config)) (*Node, error) {
	t.Helper()
	cfg := DefaultConfig("1")
	fastConfig(t)(&cfg)
	cfg.DataDir = dataDir
	cfg.Bootstrap = true
	if raftAddr != "" {
		cfg.RaftAddr = raftAddr // the configuration names the node by this address
	}
	for _, f := range configure {
		f(&cfg)
	}
	n, err := New(cfg)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := WaitLeader(ctx, n); err != nil {
		n.Shutdown()
		return nil, err
	}
	return n, nil
}

// snapshotDirs lists dataDir's snapshot directories, newest first
// (hashicorp/raft names them term-index-millis, so the name orders them
// within one test).
func snapshotDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	// hashicorp/raft's FileSnapshotStore keeps them in a "snapshots"
	// directory of its own under the path it is given.
	root := filepath.Join(dataDir, snapshotDirName, "snapshots")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range ents {
		if e.IsDir() && !strings.HasSuffix(e.Name(), ".tmp") {
			dirs = append(dirs, filepath.Join(root, e.Name()))
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
	return dirs
}

// TestSnapshotFallbackCorruptNewest: a node holding locks takes two
// snapshots and stops; its newest snapshot is then damaged (a flipped byte,
// a truncated file). It must restart from the older snapshot plus the log,
// with every held lock, its token, and a fencing counter that never goes
// back — also when the log was compacted as far as raft compacts it.
func TestSnapshotFallbackCorruptNewest(t *testing.T) {
	corruptions := map[string]func(t *testing.T, path string){
		"flipped-byte": func(t *testing.T, path string) {
			b, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			b[len(b)/2] ^= 0x40
			if err := os.WriteFile(path, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		"truncated": func(t *testing.T, path string) {
			fi, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.Truncate(path, fi.Size()/2); err != nil {
				t.Fatal(err)
			}
		},
	}
	compactions := map[string]func(*Config){
		"default-trailing-logs": func(*Config) {},
		// Raft keeps only 4 entries behind a snapshot: without the
		// store's guard the log no longer reaches back to the older one.
		"compacted": func(c *Config) { c.TrailingLogs = 4 },
	}
	for cname, corrupt := range corruptions {
		for kname, compact := range compactions {
			for _, kind := range []store.Kind{store.KindBolt, store.KindWAL} {
				t.Run(fmt.Sprintf("%s/%s/%s", cname, kname, kind), func(t *testing.T) {
					testSnapshotFallback(t, corrupt, func(c *Config) { compact(c); c.Store = kind })
				})
			}
		}
	}
}

func testSnapshotFallback(t *testing.T, corrupt func(*testing.T, string), configure func(*Config)) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := startSingle(t, dir, "", configure)
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := n.RaftAddr()
	held := map[string]lock.Token{}
	var maxToken lock.Token
	grant := func(from, to int) {
		for i := from; i < to; i++ {
			key := fmt.Sprintf("k%d", i)
			lease, err := n.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Hour, Value: []byte(key)})
			if err != nil {
				t.Fatal(err)
			}
			maxToken = max(maxToken, lease.Token)
			if i%3 == 0 { // released: its token was issued and must not come back
				if err := n.Release(ctx, lease); err != nil {
					t.Fatal(err)
				}
				continue
			}
			held[key] = lease.Token
		}
	}
	grant(0, 10)
	if err := n.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("first snapshot: %v", err)
	}
	grant(10, 20)
	if err := n.Raft().Snapshot().Error(); err != nil {
		t.Fatalf("second snapshot: %v", err)
	}
	grant(20, 25) // only in the log
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}

	snaps := snapshotDirs(t, dir)
	if len(snaps) < 2 {
		t.Fatalf("%d snapshots on disk after two snapshots, want at least 2: %v", len(snaps), snaps)
	}
	corrupt(t, filepath.Join(snaps[0], "state.bin"))

	n, err = startSingle(t, dir, raftAddr, configure)
	if err != nil {
		t.Fatalf("restart with a corrupt newest snapshot (%s) and an intact older one: %v", snaps[0], err)
	}
	defer n.Shutdown()
	for key, tok := range held {
		info, err := n.Inspect(ctx, key)
		if err != nil || info.Token != tok || string(info.Value) != key {
			t.Errorf("after restart Inspect(%q) = %+v, %v; want token %d", key, info, err, tok)
		}
	}
	if info, err := n.Inspect(ctx, "k3"); err == nil {
		t.Errorf("released lock k3 is held again after restart: %+v", info)
	}
	next, err := n.Acquire(ctx, "k0", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if next.Token <= maxToken {
		t.Errorf("first token after restart %d, want > %d (every earlier token)", next.Token, maxToken)
	}
}
