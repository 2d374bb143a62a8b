package store_test

import (
	"bytes"
	"testing"

	"github.com/hashicorp/raft"

	"github.com/lockgate/lockgate/backend/raftlock/store"
)

// smallSegment is a raft-wal segment size at which a few dozen test
// entries fill a segment, so that appends seal segments and a tail
// truncation can reach back into a sealed one.
const smallSegment = 4096

// segmentSizes are the raft-wal segment sizes the truncation tests run
// with: the default (one segment) and smallSegment (many sealed ones).
var segmentSizes = []struct {
	name string
	size int // 0: the default
}{{"one-segment", 0}, {"small-segments", smallSegment}}

// withSegmentSize runs the rest of the test with raft-wal segments of size
// bytes (0: unchanged).
func withSegmentSize(t *testing.T, size int) {
	t.Helper()
	if size > 0 {
		t.Cleanup(store.SetWALSegmentSize(size))
	}
}

// termLog is entry i of term term, with contents that tell terms apart:
// an entry a truncation removed must not come back.
func termLog(i, term uint64) *raft.Log {
	l := testLog(i)
	l.Term = term
	l.Data = append(l.Data, byte(term))
	return l
}

// storeRange stores entries first..last of term in batches of batch.
func storeRange(t *testing.T, s *store.Stores, first, last, term uint64, batch int) {
	t.Helper()
	var logs []*raft.Log
	for i := first; i <= last; i++ {
		logs = append(logs, termLog(i, term))
		if len(logs) == batch || i == last {
			if err := s.Log.StoreLogs(logs); err != nil {
				t.Fatalf("StoreLogs(%d..%d): %v", logs[0].Index, i, err)
			}
			logs = nil
		}
	}
}

// checkTerms checks that s holds exactly entries first..last, entry i being
// termLog(i, termOf(i)), and nothing after last.
func checkTerms(t *testing.T, s *store.Stores, first, last uint64, termOf func(uint64) uint64) {
	t.Helper()
	checkEntries(t, s, first, last, func(i uint64) *raft.Log { return termLog(i, termOf(i)) })
}

// tailTruncationRestart is what a follower does when the leader overwrites
// a conflicting suffix, with restarts in between: store 1..200 (term 1),
// truncate 150..200, restart, check 1..149, append 150..170 of term 2,
// restart, check again.
func tailTruncationRestart(t *testing.T, kind store.Kind) {
	dir := t.TempDir()
	s := open(t, dir, kind)
	storeRange(t, s, 1, 200, 1, 10)
	if err := s.Log.DeleteRange(150, 200); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err := tryOpen(t, dir, kind)
	if err != nil {
		t.Fatalf("%s after a tail truncation and a restart: %v", kind, err)
	}
	checkTerms(t, s, 1, 149, func(uint64) uint64 { return 1 })
	storeRange(t, s, 150, 170, 2, 7)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, dir, kind)
	defer s.Close()
	checkTerms(t, s, 1, 170, func(i uint64) uint64 {
		if i >= 150 {
			return 2
		}
		return 1
	})
}

// TestTailTruncationSurvivesRestart: the default store reopens a log whose
// tail was truncated. `lockgate-bench chaos` found that raft-wal v0.4.0 does
// not: a raftlock follower that cleared a conflicting suffix and was then
// killed panicked at restart ("sealed segment has no index block").
func TestTailTruncationSurvivesRestart(t *testing.T) {
	for _, seg := range segmentSizes {
		t.Run(seg.name, func(t *testing.T) {
			withSegmentSize(t, seg.size)
			tailTruncationRestart(t, store.Default)
		})
	}
}

// TestWALTailTruncationSurvivesRestart is the regression test of
// hashicorp/raft-wal#31 (fixed by #33 in v0.4.1), which kept raft-wal from
// being the default: v0.4.0 fails it at the first reopen.
func TestWALTailTruncationSurvivesRestart(t *testing.T) {
	for _, seg := range segmentSizes {
		t.Run(seg.name, func(t *testing.T) {
			withSegmentSize(t, seg.size)
			tailTruncationRestart(t, store.KindWAL)
		})
	}
}

// TestBoltTailTruncationSurvivesRestart: the same for directories that keep
// using bolt.
func TestBoltTailTruncationSurvivesRestart(t *testing.T) {
	tailTruncationRestart(t, store.KindBolt)
}

// sameLog compares everything a store must keep of an entry.
func sameLog(got, want *raft.Log) bool {
	return got.Index == want.Index && got.Term == want.Term && got.Type == want.Type &&
		bytes.Equal(got.Data, want.Data) && bytes.Equal(got.Extensions, want.Extensions) &&
		got.AppendedAt.Equal(want.AppendedAt)
}
