package store_test

import (
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// makeSnapshot writes a snapshot whose state is data, at index and the
// term testLog gives that index.
func makeSnapshot(t *testing.T, s *store.SnapshotStore, index uint64, data string) {
	t.Helper()
	sink, err := s.Create(raft.SnapshotVersionMax, index, testLog(index).Term, raft.Configuration{}, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sink.Write([]byte(data)); err != nil {
		t.Fatal(err)
	}
	if err := sink.Close(); err != nil {
		t.Fatal(err)
	}
}

// Compaction through LogForFallback stops at the second newest snapshot;
// deletions that reach the log's last index (a conflicting suffix, a reset)
// are not held back.
func TestLogForFallbackKeepsOlderSnapshotsLog(t *testing.T) {
	for _, kind := range allKinds {
		t.Run(string(kind), func(t *testing.T) {
			dir := t.TempDir()
			st := open(t, dir, kind)
			defer st.Close()
			snaps, err := store.OpenSnapshots(filepath.Join(dir, "snapshots"), hclog.NewNullLogger())
			if err != nil {
				t.Fatal(err)
			}
			logs := store.LogForFallback(st.Log, snaps)
			if _, ok := logs.(raft.MonotonicLogStore); ok != (kind == store.KindWAL) {
				t.Errorf("LogForFallback(%s) implements MonotonicLogStore: %v", kind, ok)
			}
			for i := uint64(1); i <= 100; i++ {
				if err := logs.StoreLog(testLog(i)); err != nil {
					t.Fatal(err)
				}
			}
			makeSnapshot(t, snaps, 40, "a")
			makeSnapshot(t, snaps, 90, "b")
			// raft after the snapshot at 90 with TrailingLogs 5.
			if err := logs.DeleteRange(1, 90); err != nil {
				t.Fatal(err)
			}
			var e raft.Log
			if err := logs.GetLog(41, &e); err != nil {
				t.Errorf("entry 41, the first after the older snapshot, was compacted: %v", err)
			}
			if kind == store.KindBolt { // raft-wal drops whole segments only
				if err := logs.GetLog(40, &e); err == nil {
					t.Error("entry 40 survived a compaction that may remove it")
				}
			}
			// A conflicting suffix is removed in full.
			if err := logs.DeleteRange(95, 100); err != nil {
				t.Fatal(err)
			}
			if last, _ := logs.LastIndex(); last != 94 {
				t.Errorf("last index %d after deleting the suffix 95..100, want 94", last)
			}
		})
	}
}

// Every directory and file the snapshot store writes is private, and a
// snapshot whose state does not load is refused by name when the log cannot
// replace it.
func TestSnapshotStorePrivateAndRecover(t *testing.T) {
	dir := t.TempDir()
	st := open(t, dir, store.KindBolt)
	defer st.Close()
	path := filepath.Join(dir, "snapshots")
	snaps, err := store.OpenSnapshots(path, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	makeSnapshot(t, snaps, 10, "old")
	makeSnapshot(t, snaps, 20, "new")
	filepath.WalkDir(path, func(p string, d os.DirEntry, err error) error {
		info, _ := d.Info()
		if want := map[bool]os.FileMode{true: store.DirMode, false: store.FileMode}[d.IsDir()]; info.Mode().Perm() != want {
			t.Errorf("%s is %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	load := func(rc io.ReadCloser) error {
		b, _ := io.ReadAll(rc)
		rc.Close()
		if string(b) == "new" {
			return errors.New("undecodable")
		}
		return nil
	}
	// The log is empty: it cannot bring the old snapshot up to the new one.
	err = snaps.Recover(st.Log, load, hclog.NewNullLogger())
	if !errors.Is(err, store.ErrCorruptSnapshot) || !strings.Contains(err.Error(), "state.bin") || !strings.Contains(err.Error(), "undecodable") {
		t.Fatalf("Recover = %v; want ErrCorruptSnapshot naming the state file and the cause", err)
	}
	// With the log from 11 to 25, agreeing with the new snapshot's term at
	// 20, it can.
	for i := uint64(11); i <= 25; i++ {
		if err := st.Log.StoreLog(testLog(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := snaps.Recover(st.Log, load, hclog.NewNullLogger()); err != nil {
		t.Fatalf("Recover with a complete log: %v", err)
	}
	metas, _ := snaps.List()
	if len(metas) != 1 || metas[0].Index != 10 {
		t.Fatalf("after Recover raft sees %d snapshots (newest %+v), want only the one at 10", len(metas), metas[0])
	}
	if ents, _ := os.ReadDir(filepath.Join(path, "corrupt")); len(ents) != 1 {
		t.Errorf("corrupt/ holds %d entries, want the moved snapshot", len(ents))
	}
}
