package store_test

import (
	"strings"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// truncateTailAndReopen stores entries 1..20, truncates 15..20 the way a
// follower clears a conflicting suffix, reopens the store (a restart) and
// reads entry 1.
func truncateTailAndReopen(t *testing.T, kind store.Kind) error {
	t.Helper()
	dir := t.TempDir()
	s := open(t, dir, kind)
	var logs []*raft.Log
	for i := uint64(1); i <= 20; i++ {
		logs = append(logs, &raft.Log{Index: i, Term: 1, Type: raft.LogCommand, Data: []byte("x")})
	}
	if err := s.Log.StoreLogs(logs); err != nil {
		t.Fatal(err)
	}
	if err := s.Log.DeleteRange(15, 20); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := tryOpen(t, dir, kind)
	if err != nil {
		return err
	}
	defer s.Close()
	var l raft.Log
	return s.Log.GetLog(1, &l)
}

// TestTailTruncationSurvivesRestart: the default store reopens a log whose
// tail was truncated. `lockgate bench chaos` found that raft-wal v0.4.0 does
// not: a raftlock follower that cleared a conflicting suffix and was then
// killed panicked at restart ("sealed segment has no index block").
func TestTailTruncationSurvivesRestart(t *testing.T) {
	if err := truncateTailAndReopen(t, store.Default); err != nil {
		t.Fatalf("default store %s after a tail truncation and a restart: %v", store.Default, err)
	}
}

// TestWALTailTruncationBug pins hashicorp/raft-wal#31 (fixed by #33, after
// v0.4.0, the only release the module proxy serves): when this fails, the
// upgraded raft-wal reopens truncated logs and can be the default again
// (docs/raftlock-store.md).
func TestWALTailTruncationBug(t *testing.T) {
	err := truncateTailAndReopen(t, store.KindWAL)
	if err == nil || !strings.Contains(err.Error(), "sealed segment has no index block") {
		t.Fatalf("raft-wal after a tail truncation and a restart: %v; the known bug is gone: revisit store.Default", err)
	}
}
