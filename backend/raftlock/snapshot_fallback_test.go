package raftlock

import (
	"context"
	"errors"
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

// snapshotDirs lists dataDir's snapshot directories, newest first, as
// hashicorp/raft orders them (term, then index: the names are
// term-index-millis).
func snapshotDirs(t *testing.T, dataDir string) []string {
	t.Helper()
	// hashicorp/raft's FileSnapshotStore keeps them in a "snapshots"
	// directory of its own under the path it is given.
	root := filepath.Join(dataDir, snapshotDirName, "snapshots")
	ents, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	type snap struct {
		path        string
		term, index uint64
	}
	var snaps []snap
	for _, e := range ents {
		var s snap
		var ms uint64
		if !e.IsDir() || strings.HasSuffix(e.Name(), ".tmp") {
			continue
		}
		if _, err := fmt.Sscanf(e.Name(), "%d-%d-%d", &s.term, &s.index, &ms); err != nil {
			t.Fatalf("snapshot directory %s: %v", e.Name(), err)
		}
		s.path = filepath.Join(root, e.Name())
		snaps = append(snaps, s)
	}
	sort.Slice(snaps, func(i, j int) bool {
		a, b := snaps[i], snaps[j]
		return a.term > b.term || (a.term == b.term && a.index > b.index)
	})
	dirs := make([]string, len(snaps))
	for i, s := range snaps {
		dirs[i] = s.path
	}
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
	if n.cfg.TrailingLogs < 10 && n.cfg.Store == store.KindBolt && firstIndex(n) <= 1 {
		// Bolt deletes what raft compacts (raft-wal only whole segments).
		t.Fatalf("the log still starts at index %d: the test did not exercise compaction", firstIndex(n))
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

// TestSnapshotFallbackRefusesGap: when the newest snapshot is corrupt and
// the log no longer reaches back to the older one (compacted by a version
// without the store's guard, or damaged), the node refuses to start, naming
// the corrupt file, instead of panicking in hashicorp/raft or starting with
// a hole in its history; nothing on disk is changed.
func TestSnapshotFallbackRefusesGap(t *testing.T) {
	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	n, err := startSingle(t, dir, "")
	if err != nil {
		t.Fatal(err)
	}
	raftAddr := n.RaftAddr()
	for i := range 3 {
		for j := range 5 {
			if _, err := n.Acquire(ctx, fmt.Sprintf("k%d-%d", i, j), lock.AcquireOptions{TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
		}
		if i < 2 {
			if err := n.Raft().Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := n.Shutdown(); err != nil {
		t.Fatal(err)
	}
	snaps := snapshotDirs(t, dir)
	if len(snaps) != 2 {
		t.Fatalf("snapshots %v, want 2", snaps)
	}
	var term, older, ms uint64
	if _, err := fmt.Sscanf(filepath.Base(snaps[1]), "%d-%d-%d", &term, &older, &ms); err != nil {
		t.Fatal(err)
	}
	// Cut the log as an unguarded compaction would have: past the older
	// snapshot's index.
	st, err := store.Open(dir, store.Default)
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Log.DeleteRange(1, older+2); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(snaps[0], "state.bin")
	b, err := os.ReadFile(state)
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)/2] ^= 0x40
	if err := os.WriteFile(state, b, 0o600); err != nil {
		t.Fatal(err)
	}

	n, err = startSingle(t, dir, raftAddr)
	if err == nil {
		n.Shutdown()
		t.Fatal("the node started with a corrupt newest snapshot and a log that does not reach the older one")
	}
	if !errors.Is(err, store.ErrCorruptSnapshot) || !strings.Contains(err.Error(), state) {
		t.Errorf("start error %q: want store.ErrCorruptSnapshot naming %s", err, state)
	}
	if got := snapshotDirs(t, dir); len(got) != 2 || got[0] != snaps[0] {
		t.Errorf("a refused start moved snapshots: %v, was %v", got, snaps)
	}
}
