package raftlock

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
)

// listTree returns every path under root, relative to it.
func listTree(t *testing.T, root string) map[string]fs.FileMode {
	t.Helper()
	out := map[string]fs.FileMode{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		out[rel] = info.Mode()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// TestDataDirLockedAcrossStoreKinds: while a node runs on a data
// directory, a second node on it — with the same --store kind or the other
// one — fails at once with an error naming the directory and the holder,
// and writes nothing there (it used to bootstrap a second cluster beside
// the first with the other kind). After the first node stops, the other
// kind is still refused: the directory holds the first kind's log.
func TestDataDirLockedAcrossStoreKinds(t *testing.T) {
	for _, first := range []store.Kind{store.KindBolt, store.KindWAL} {
		t.Run(string(first), func(t *testing.T) {
			dir := t.TempDir()
			n, err := startSingle(t, dir, "", func(c *Config) { c.Store = first })
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if _, err := n.Acquire(ctx, "a", lock.AcquireOptions{TTL: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if err := n.Raft().Snapshot().Error(); err != nil {
				t.Fatal(err)
			}
			before := listTree(t, dir)
			for _, second := range []store.Kind{store.KindBolt, store.KindWAL} {
				cfg := DefaultConfig("2")
				fastConfig(t)(&cfg)
				cfg.DataDir, cfg.Bootstrap, cfg.Store = dir, true, second
				start := time.Now()
				n2, err := New(cfg)
				if err == nil {
					n2.Shutdown()
					t.Fatalf("a second node (--store %s) started on %s, in use by a --store %s node", second, dir, first)
				}
				if !errors.Is(err, store.ErrLocked) {
					t.Errorf("second node (--store %s): error %q does not match store.ErrLocked", second, err)
				}
				msg := err.Error()
				if !strings.Contains(msg, dir) || !strings.Contains(msg, "locked") {
					t.Errorf("second node (--store %s): error %q should name %s and say it is locked", second, msg, dir)
				}
				if pid := strconv.Itoa(os.Getpid()); !strings.Contains(msg, "this process") && !strings.Contains(msg, pid) {
					t.Errorf("second node (--store %s): error %q names no holder", second, msg)
				}
				if d := time.Since(start); d > 5*time.Second {
					t.Errorf("second node (--store %s) took %v to fail", second, d)
				}
			}
			after := listTree(t, dir)
			for p := range after {
				if _, ok := before[p]; !ok {
					t.Errorf("the refused nodes wrote %s into the running node's data directory", p)
				}
			}
			if err := n.Shutdown(); err != nil {
				t.Fatal(err)
			}

			other := store.KindWAL
			if first == store.KindWAL {
				other = store.KindBolt
			}
			_, err = startSingle(t, dir, "", func(c *Config) { c.Store = other })
			if !errors.Is(err, store.ErrOtherKind) {
				t.Fatalf("a --store %s node on a stopped --store %s node's directory: err %v, want store.ErrOtherKind", other, first, err)
			}
		})
	}
}

// TestDataDirPermissions: in a data directory the operator created 0755,
// after the node has written its log and snapshots, every directory is 0700 and every file
// 0600: snapshots and the log hold every lease's secret handle.
func TestDataDirPermissions(t *testing.T) {
	for _, kind := range []store.Kind{store.KindBolt, store.KindWAL} {
		t.Run(string(kind), func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "data")
			if err := os.Mkdir(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Chmod(dir, 0o755); err != nil { // whatever the umask
				t.Fatal(err)
			}
			n, err := startSingle(t, dir, "", func(c *Config) { c.Store = kind })
			if err != nil {
				t.Fatal(err)
			}
			defer n.Shutdown()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			for i := range 2 {
				if _, err := n.Acquire(ctx, "k"+strconv.Itoa(i), lock.AcquireOptions{TTL: time.Hour}); err != nil {
					t.Fatal(err)
				}
				if err := n.Raft().Snapshot().Error(); err != nil {
					t.Fatal(err)
				}
			}
			files := 0
			for p, mode := range listTree(t, dir) {
				switch {
				case mode.IsDir() && mode.Perm() != store.DirMode:
					t.Errorf("directory %s is %v, want %v", p, mode.Perm(), store.DirMode)
				case mode.IsRegular():
					files++
					if mode.Perm() != store.FileMode {
						t.Errorf("file %s is %v, want %v", p, mode.Perm(), store.FileMode)
					}
				}
			}
			if files < 3 {
				t.Fatalf("only %d files in %s: the test saw no log or snapshot", files, dir)
			}
		})
	}
}
