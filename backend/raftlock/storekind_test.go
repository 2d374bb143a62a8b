package raftlock

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/lockgate/lockgate/backend/raftlock/store"
	"github.com/lockgate/lockgate/lock"
)

// TestDefaultStoreKeepsExistingKind: a node started without a Store — the
// CLI's --store auto — on a data directory an earlier release wrote with
// bolt (its default then) keeps using that log, with every lease in it; a
// node on a new directory gets raft-wal. Nothing is migrated: the other
// kind's log is never created beside the existing one.
func TestDefaultStoreKeepsExistingKind(t *testing.T) {
	for _, first := range []store.Kind{store.KindBolt, store.KindWAL} {
		t.Run(string(first), func(t *testing.T) {
			dir := t.TempDir()
			n, err := startSingle(t, dir, "", func(c *Config) { c.Store = first })
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			lease, err := n.Acquire(ctx, "kept", lock.AcquireOptions{TTL: time.Hour})
			if err != nil {
				t.Fatal(err)
			}
			if err := n.Shutdown(); err != nil {
				t.Fatal(err)
			}

			n, err = startSingle(t, dir, "") // Store left zero
			if err != nil {
				t.Fatalf("default store on a %s directory: %v", first, err)
			}
			defer n.Shutdown()
			if n.stores.Kind != first {
				t.Fatalf("default store on a %s directory opened %s (%s)", first, n.stores.Kind, n.stores.Why)
			}
			info, err := n.Inspect(ctx, "kept")
			if err != nil || info.Token != lease.Token {
				t.Fatalf("after the restart the lease reads %+v, %v; want token %d from the %s log", info, err, lease.Token, first)
			}
			other := map[store.Kind]string{store.KindBolt: "raft-wal", store.KindWAL: "raft.db"}[first]
			if _, err := os.Lstat(filepath.Join(dir, other)); !os.IsNotExist(err) {
				t.Fatalf("%s appeared beside the %s log: %v", other, first, err)
			}
		})
	}
	t.Run("new", func(t *testing.T) {
		dir := t.TempDir()
		n, err := startSingle(t, dir, "")
		if err != nil {
			t.Fatal(err)
		}
		defer n.Shutdown()
		if n.stores.Kind != store.KindWAL {
			t.Fatalf("default store on a new directory: %s (%s), want wal", n.stores.Kind, n.stores.Why)
		}
		if _, err := os.Stat(filepath.Join(dir, "raft-wal")); err != nil {
			t.Fatal(err)
		}
	})
}
