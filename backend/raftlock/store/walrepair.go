package store

import (
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/types"
)

// completeInterruptedRotation finishes a raft-wal segment rotation that a
// crash (or a Close) cut short, before raft-wal opens dir.
//
// raft-wal seals a full tail segment in the append that fills it (the
// index block goes out with that append's fsync) and records the seal and
// the next segment in its meta database afterwards, in the background. If
// the process dies in between, the file is sealed but the meta database
// still calls it the writable tail; raft-wal v0.4.2 (and its main branch
// as of this writing) reopens it as the tail and every later append fails
// with "segment is sealed": the node can never write again.
// TestCrashAfterSegmentSeal reproduces it with SIGKILL.
//
// The repair commits the meta state the rotation would have committed
// (raft-wal's rotateSegmentLocked and createNextSegment): the tail marked
// sealed at its last entry, and a new, empty tail segment after it, whose
// file raft-wal creates on open as it does after a crash that came just
// after such a commit. Nothing is read from or written to the segment
// files beyond what raft-wal's own recovery of the tail does.
func completeInterruptedRotation(dir string, meta *metadb.BoltMetaDB, sf types.SegmentFiler, log hclog.Logger) error {
	ps, err := meta.Load(dir)
	if err != nil {
		return fmt.Errorf("store: read raft-wal meta in %s: %w", dir, err)
	}
	if len(ps.Segments) == 0 {
		return nil
	}
	tail := &ps.Segments[len(ps.Segments)-1]
	if !tail.SealTime.IsZero() {
		return nil
	}
	w, err := sf.RecoverTail(*tail)
	if errors.Is(err, os.ErrNotExist) {
		return nil // never written: raft-wal creates it
	}
	if err != nil {
		return fmt.Errorf("store: recover raft-wal tail segment %d in %s: %w", tail.ID, dir, err)
	}
	sealed, indexStart, err := w.Sealed()
	last := w.LastIndex()
	if err = errors.Join(err, w.Close()); err != nil {
		return fmt.Errorf("store: recover raft-wal tail segment %d in %s: %w", tail.ID, dir, err)
	}
	if !sealed {
		return nil
	}
	if last < tail.BaseIndex {
		// Not a state an interrupted rotation leaves (rotation follows an
		// append): refuse rather than guess.
		return fmt.Errorf("store: raft-wal tail segment %d in %s is sealed but holds no entries; "+
			"not a crash state this repair knows", tail.ID, dir)
	}
	now := time.Now()
	tail.SealTime, tail.MaxIndex, tail.IndexStart = now, last, indexStart
	ps.Segments = append(ps.Segments, types.SegmentInfo{
		ID:         ps.NextSegmentID,
		BaseIndex:  last + 1,
		MinIndex:   last + 1,
		SizeLimit:  uint32(walSegmentSize),
		Codec:      tail.Codec,
		CreateTime: now,
	})
	ps.NextSegmentID++
	if err := meta.CommitState(ps); err != nil {
		return fmt.Errorf("store: complete interrupted raft-wal segment rotation in %s: %w", dir, err)
	}
	log.Warn("completed a segment rotation a crash interrupted (sealed tail segment not yet recorded as sealed)",
		"dir", dir, "segment", tail.ID, "last_index", last, "new_segment", ps.NextSegmentID-1)
	return nil
}
