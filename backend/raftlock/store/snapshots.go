package store

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
)

// SnapshotsRetained is how many snapshots the snapshot store keeps. The
// node falls back to an older one when the newest does not load, and
// LogForFallback keeps the log back to the second newest so that fallback
// always has the entries it needs; the third is a last resort, usable when
// the log happens to reach back to it.
const SnapshotsRetained = 3

// raftSnapshotDir is the directory hashicorp/raft's FileSnapshotStore keeps
// its snapshots in, under the path it is given.
const raftSnapshotDir = "snapshots"

// corruptDirName is where Recover moves snapshots that do not load, under
// the snapshot store's path: out of raft's sight (it would count them
// towards SnapshotsRetained and try them again at every start) but kept
// for the operator to inspect.
const corruptDirName = "corrupt"

// ErrCorruptSnapshot is wrapped by Recover's error when no snapshot that
// loads can be combined with the log.
var ErrCorruptSnapshot = errors.New("store: corrupt snapshot")

// SnapshotStore is hashicorp/raft's FileSnapshotStore with lockgate's
// permissions: FileSnapshotStore creates directories 0755 and files with
// the process umask (0644 typically), and a snapshot holds every lease's
// secret handle. Each snapshot is tightened to DirMode/FileMode when its
// sink closes, and the whole store when it opens, without touching the
// process umask (other goroutines create files too).
type SnapshotStore struct {
	*raft.FileSnapshotStore
	path string // as given to OpenSnapshots
}

// OpenSnapshots opens (creating it) the snapshot store at path, keeping
// SnapshotsRetained snapshots.
func OpenSnapshots(path string, logger hclog.Logger) (*SnapshotStore, error) {
	fss, err := raft.NewFileSnapshotStoreWithLogger(path, SnapshotsRetained, logger)
	if err != nil {
		return nil, fmt.Errorf("store: snapshot store: %w", err)
	}
	if err := Tighten(path); err != nil {
		return nil, err
	}
	return &SnapshotStore{FileSnapshotStore: fss, path: path}, nil
}

// Create starts a new snapshot; its sink tightens the snapshot's files
// when it closes.
func (s *SnapshotStore) Create(version raft.SnapshotVersion, index, term uint64,
	configuration raft.Configuration, configurationIndex uint64, trans raft.Transport) (raft.SnapshotSink, error) {
	sink, err := s.FileSnapshotStore.Create(version, index, term, configuration, configurationIndex, trans)
	if err != nil {
		return nil, err
	}
	return &privateSink{SnapshotSink: sink, dir: filepath.Join(s.path, raftSnapshotDir)}, nil
}

// privateSink tightens a snapshot once FileSnapshotSink.Close has moved it
// from its temporary directory to its final one.
type privateSink struct {
	raft.SnapshotSink
	dir string
}

func (p *privateSink) Close() error {
	if err := p.SnapshotSink.Close(); err != nil {
		return err
	}
	return Tighten(filepath.Join(p.dir, p.ID()))
}

// snapshotPath is the directory of snapshot id.
func (s *SnapshotStore) snapshotPath(id string) string {
	return filepath.Join(s.path, raftSnapshotDir, id)
}

// Recover makes sure hashicorp/raft will start from the newest snapshot
// that loads, combined with the log, or not at all. raft already tries
// older snapshots when the newest does not load, but then replays the log
// from the older one's index and panics on the first entry compaction
// removed; and a damaged meta.json hides a snapshot from it silently.
//
// Recover opens each snapshot, newest first (FileSnapshotStore.Open checks
// its CRC), and runs load on it (the state machine's decoder, on a scratch
// state machine). When the newest loads, it returns nil. When an older one
// loads and the log holds every entry after it, and agrees with the newer
// snapshots' last index and term (so it is the log they were taken from),
// it moves the newer, corrupt snapshots aside into corrupt/ and returns
// nil. Otherwise it returns an error wrapping ErrCorruptSnapshot that
// names the corrupt files, and changes nothing. An empty store needs
// nothing.
func (s *SnapshotStore) Recover(logs raft.LogStore, load func(io.ReadCloser) error, logger hclog.Logger) error {
	metas, err := s.List()
	if err != nil {
		return fmt.Errorf("store: list snapshots: %w", err)
	}
	hidden, err := s.unreadable(metas)
	if err != nil {
		return err
	}
	var bad []string // state files (or directories) that do not load, newest first
	base := -1       // index in metas of the newest snapshot that loads
	for i, m := range metas {
		if err := s.tryLoad(m.ID, load); err != nil {
			logger.Error("snapshot does not load", "id", m.ID, "error", err)
			bad = append(bad, fmt.Sprintf("%s (%v)", filepath.Join(s.snapshotPath(m.ID), "state.bin"), err))
			continue
		}
		base = i
		break
	}
	if base == 0 && len(hidden) == 0 {
		// raft replays the log from the snapshot: a log compacted past
		// it (damaged, or truncated by hand) would panic NewRaft.
		if err := logReaches(logs, metas[0].Index); err != nil {
			return fmt.Errorf("store: snapshot %s: %v", s.snapshotPath(metas[0].ID), err)
		}
		return nil
	}
	if len(metas) == 0 && len(hidden) == 0 {
		return nil
	}
	for _, h := range hidden {
		bad = append(bad, fmt.Sprintf("%s (unreadable metadata)", h))
	}
	var from, wantIndex, wantTerm uint64 // replay from; the entry the newest corrupt snapshot ended at
	if base >= 0 {
		from = metas[base].Index
	}
	if base != 0 && len(metas) > 0 {
		wantIndex, wantTerm = metas[0].Index, metas[0].Term
	}
	if err := logCovers(logs, from, wantIndex, wantTerm); err != nil {
		return fmt.Errorf("%w: %s; the log cannot replace it: %v. Restore this node from a backup, "+
			"or remove its data directory and let it rejoin the cluster (docs/operations.md)",
			ErrCorruptSnapshot, strings.Join(bad, ", "), err)
	}
	// Falling back is safe: move the corrupt snapshots out of raft's way
	// so that it restores the one that loads, and keeps them out of its
	// retention count.
	var corrupt []string
	for _, m := range metas {
		if base >= 0 && m.ID == metas[base].ID {
			break
		}
		corrupt = append(corrupt, m.ID)
	}
	for _, h := range hidden {
		corrupt = append(corrupt, filepath.Base(h))
	}
	if err := os.MkdirAll(filepath.Join(s.path, corruptDirName), DirMode); err != nil {
		return fmt.Errorf("store: %w", err)
	}
	for _, id := range corrupt {
		to := filepath.Join(s.path, corruptDirName, id)
		if err := os.Rename(s.snapshotPath(id), to); err != nil {
			return fmt.Errorf("store: moving corrupt snapshot aside: %w", err)
		}
		logger.Warn("corrupt snapshot moved aside; starting from an older snapshot and the log", "moved_to", to)
	}
	return nil
}

// tryLoad opens snapshot id (which checks its CRC) and runs load on it.
func (s *SnapshotStore) tryLoad(id string, load func(io.ReadCloser) error) error {
	_, rc, err := s.Open(id)
	if err != nil {
		return err
	}
	return load(rc) // load closes rc, as raft.FSM.Restore does
}

// unreadable lists the snapshot directories FileSnapshotStore ignores
// because their metadata does not parse, when they are newer than the
// newest it lists: raft would start from an older state without a word.
func (s *SnapshotStore) unreadable(metas []*raft.SnapshotMeta) ([]string, error) {
	dir := filepath.Join(s.path, raftSnapshotDir)
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("store: list snapshots: %w", err)
	}
	listed := map[string]bool{}
	for _, m := range metas {
		listed[m.ID] = true
	}
	var out []string
	for _, e := range ents {
		name := e.Name()
		if !e.IsDir() || listed[name] || strings.HasSuffix(name, ".tmp") {
			continue
		}
		// Only newer ones matter; IDs are term-index-millis, and an older
		// unreadable one is simply a snapshot raft would have reaped.
		if len(metas) > 0 && !newerID(name, metas[0]) {
			continue
		}
		out = append(out, filepath.Join(dir, name))
	}
	return out, nil
}

// newerID reports whether snapshot directory name (term-index-millis)
// orders after m, as FileSnapshotStore orders them (term, then index).
func newerID(name string, m *raft.SnapshotMeta) bool {
	var term, index, ms uint64
	if _, err := fmt.Sscanf(name, "%d-%d-%d", &term, &index, &ms); err != nil {
		return true // not raft's name: be safe and treat it as newer
	}
	return term > m.Term || (term == m.Term && index > m.Index)
}

// logCovers checks that logs holds every entry from from+1 to its last
// (NewRaft reads each of them, and panics on a missing one), and, when
// wantIndex > 0, that its entry at wantIndex has term wantTerm: by Raft's
// log matching property the entries up to it are then exactly those the
// corrupt snapshot was taken from.
func logCovers(logs raft.LogStore, from, wantIndex, wantTerm uint64) error {
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	if wantIndex > last {
		return fmt.Errorf("the log ends at index %d, before the corrupt snapshot's index %d", last, wantIndex)
	}
	if err := logReaches(logs, from); err != nil {
		return err
	}
	var e raft.Log
	for i := from + 1; i <= last; i++ {
		if err := logs.GetLog(i, &e); err != nil {
			return fmt.Errorf("log entry %d: %w", i, err)
		}
		if i == wantIndex && e.Term != wantTerm {
			return fmt.Errorf("log entry %d has term %d, the corrupt snapshot's last entry term %d", i, e.Term, wantTerm)
		}
	}
	return nil
}

// logReaches checks that logs, if it has entries after from, has the one
// right after it.
func logReaches(logs raft.LogStore, from uint64) error {
	first, err := logs.FirstIndex()
	if err != nil {
		return err
	}
	last, err := logs.LastIndex()
	if err != nil {
		return err
	}
	if last > from && first > from+1 {
		return fmt.Errorf("the log was compacted to index %d; replaying from the snapshot at %d needs index %d", first, from, from+1)
	}
	return nil
}

// LogForFallback wraps logs so that compaction after a snapshot keeps the
// entries after the second newest snapshot in snaps, once there are two: without them a node
// whose newest snapshot is damaged has nothing to start from but a backup.
// The disk cost is one snapshot interval of log entries beyond
// TrailingLogs (docs/raftlock-store.md).
//
// Only compaction is held back: hashicorp/raft's other deletions remove
// the log's tail (a conflicting suffix, RecoverCluster, the reset of a
// monotonic store after a snapshot install), and they always reach the
// last index, while compaction always stops TrailingLogs (>= 1) short of
// it. The returned store implements raft.MonotonicLogStore exactly when
// logs does.
func LogForFallback(logs raft.LogStore, snaps raft.SnapshotStore) raft.LogStore {
	g := &fallbackLog{LogStore: logs, snaps: snaps}
	if m, ok := logs.(raft.MonotonicLogStore); ok && m.IsMonotonic() {
		return monotonicFallbackLog{g}
	}
	return g
}

type fallbackLog struct {
	raft.LogStore
	snaps raft.SnapshotStore
}

type monotonicFallbackLog struct{ *fallbackLog }

func (monotonicFallbackLog) IsMonotonic() bool { return true }

// DeleteRange deletes [min, max], but a compaction no further than the
// second newest snapshot's index.
func (g *fallbackLog) DeleteRange(min, max uint64) error {
	last, err := g.LogStore.LastIndex()
	if err != nil {
		return err
	}
	if max < last {
		metas, err := g.snaps.List()
		if err != nil {
			return fmt.Errorf("store: list snapshots: %w", err)
		}
		// With a single snapshot there is nothing to fall back to (a
		// corrupt only snapshot is refused by name either way), so
		// compaction goes as far as raft asks.
		if len(metas) >= 2 && max > metas[1].Index {
			max = metas[1].Index
		}
		if max < min {
			return nil
		}
	}
	return g.LogStore.DeleteRange(min, max)
}
