// Package store opens the durable Raft log store and stable store used by the
// raftlock backend's hashicorp/raft node.
//
// Two implementations are available: raft-wal ([KindWAL]), a segmented
// write-ahead log that fsyncs once per append, and raft-boltdb/v2
// ([KindBolt]), a BoltDB B+tree that fdatasyncs twice per append. [KindAuto]
// keeps the kind a data directory already holds and gives a new one
// [Default], KindWAL; see docs/raftlock-store.md.
package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/raft"
	raftboltdb "github.com/hashicorp/raft-boltdb/v2"
	wal "github.com/hashicorp/raft-wal"
	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/metadb"
	"github.com/hashicorp/raft-wal/segment"
	"go.etcd.io/bbolt"
)

// Kind names a LogStore/StableStore implementation.
type Kind string

const (
	// KindWAL is github.com/hashicorp/raft-wal, stored in dir/raft-wal.
	KindWAL Kind = "wal"
	// KindBolt is github.com/hashicorp/raft-boltdb/v2, stored in dir/raft.db.
	KindBolt Kind = "bolt"

	// KindAuto opens the kind the data directory already holds (raft.db:
	// KindBolt, raft-wal/: KindWAL) and Default in a directory that holds
	// neither. It is the node's default: a directory written by an earlier
	// release, whose default was KindBolt, keeps its log; nothing is
	// migrated behind the operator's back.
	KindAuto Kind = "auto"

	// Default is the kind KindAuto gives a new data directory. KindWAL
	// measured faster (BenchmarkApply, three nodes: half the syncs per
	// commit, about half the commit latency, 1.6x the throughput; bench latency:
	// 0.35-0.42x etcd's sequential p50 against bolt's 0.61-0.68x). It was
	// KindBolt while raft-wal v0.4.0 could not reopen a log whose tail was
	// truncated (hashicorp/raft-wal#31, fixed by #33 in v0.4.1); the
	// TailTruncation and crash tests pin the fix.
	Default = KindWAL
)

// File and directory names under the dir given to Open.
const (
	walDirName   = "raft-wal"
	boltFileName = "raft.db"
)

// boltLockTimeout bounds how long Open waits for another holder of raft.db's
// lock before failing (bbolt would otherwise wait forever).
const boltLockTimeout = time.Second

// walSegmentSize is the size of one raft-wal segment file:
// raft-wal's own default (64 MiB). A variable only so that tests can
// make segments small enough to seal every few dozen appends.
var walSegmentSize = wal.DefaultSegmentSize

// kinds lists the valid kinds in the order error messages show them.
var kinds = []Kind{KindWAL, KindBolt, KindAuto}

// Stores is an open durable log store and stable store.
type Stores struct {
	// Log is the Raft log. For KindWAL it also implements
	// raft.MonotonicLogStore, which Log passes through unwrapped.
	Log raft.LogStore
	// Stable holds Raft's current term, last vote and similar keys.
	Stable raft.StableStore
	// Close releases the files and their locks. Call it only after
	// raft.Shutdown has returned; later calls return the first call's result.
	Close func() error
	// Kind is the kind opened: KindWAL or KindBolt, never KindAuto.
	Kind Kind
	// Why says why Open chose Kind, for the node's log: asked for, found
	// in the directory, or the default for a new directory.
	Why string
}

// ParseKind returns the Kind named by s, or an error listing the valid kinds.
func ParseKind(s string) (Kind, error) {
	for _, k := range kinds {
		if Kind(s) == k {
			return k, nil
		}
	}
	return "", fmt.Errorf("store: unknown kind %q (valid kinds: %s)", s, validKinds())
}

func validKinds() string {
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = string(k)
	}
	return strings.Join(names, ", ")
}

// Open opens, creating it if needed, the durable log and stable store of kind
// under dir: dir/raft-wal for KindWAL, dir/raft.db for KindBolt. KindAuto
// opens the kind dir already holds, or Default if it holds neither; the
// returned Stores says which kind and why.
//
// Before anything else it takes dir/LOCK (LockFileName): only one Stores,
// of either kind, may have a dir open at a time, and a second Open fails at
// once with a *LockedError (errors.Is ErrLocked) naming the directory and
// the holder's PID. The lock also covers everything else the node keeps in
// dir (its snapshots): hold it until raft.Shutdown has returned. A dir that
// holds the other kind's log is refused (ErrOtherKind), and so is, with
// KindAuto, a dir that holds both. dir and everything in it are set to
// DirMode/FileMode. Close must be called after raft.Shutdown.
func Open(dir string, kind Kind) (*Stores, error) {
	if _, err := ParseKind(string(kind)); err != nil {
		return nil, err
	}
	if dir == "" {
		return nil, errors.New("store: empty directory path")
	}
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	// Tighten the directory itself before the lock file is created in it:
	// an operator's 0755 directory must not expose even a moment's state.
	if err := os.Chmod(dir, DirMode); err != nil {
		return nil, fmt.Errorf("store: data directory permissions: %w", err)
	}
	unlock, err := lockFile(filepath.Join(dir, LockFileName))
	if err != nil {
		return nil, err
	}
	kind, why, err := resolveKind(dir, kind)
	if err != nil {
		return nil, errors.Join(err, unlock())
	}
	var s *Stores
	switch kind {
	case KindWAL:
		s, err = openWAL(filepath.Join(dir, walDirName))
	default:
		s, err = openBolt(filepath.Join(dir, boltFileName))
	}
	if err != nil {
		return nil, errors.Join(err, unlock())
	}
	// Files earlier versions or other tools left with wider modes, and
	// the ones the stores just created (raft-wal's meta database is 0644).
	if err := Tighten(dir); err != nil {
		return nil, errors.Join(err, s.Close(), unlock())
	}
	closeStores := s.Close
	s.Close = sync.OnceValue(func() error { return errors.Join(closeStores(), unlock()) })
	s.Kind, s.Why = kind, why
	return s, nil
}

// ensureDir makes sure dir is a directory, creating it (and fsyncing its
// parent so the new entry survives a crash) if it does not exist.
func ensureDir(dir string) error {
	fi, err := os.Stat(dir)
	switch {
	case err == nil:
		if !fi.IsDir() {
			return fmt.Errorf("store: %s exists and is not a directory", dir)
		}
		return nil
	case !errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("store: %w", err)
	}
	if err := os.MkdirAll(dir, DirMode); err != nil {
		return fmt.Errorf("store: create directory: %w", err)
	}
	return syncDir(filepath.Dir(dir))
}

// syncDir fsyncs a directory so that entries created in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("store: sync directory: %w", err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("store: sync directory %s: %w", dir, err)
	}
	return nil
}

func openWAL(dir string) (*Stores, error) {
	if err := ensureDir(dir); err != nil {
		return nil, err
	}
	// We keep the meta store so that a failed wal.Open can close it: left
	// open, wal-meta.db would stay locked until the process exits and a
	// re-Open in the same process would hang. (WAL.Close closes it since
	// v0.4.1; closing it again is a no-op. Open's directory lock keeps a
	// second node out before bbolt's lock, which would wait forever, is
	// reached.)
	meta := &metadb.BoltMetaDB{}
	sf := segment.NewFiler(dir, privateFS{walfs.New()})
	log := hclog.Default().Named("raft-wal")
	if err := completeInterruptedRotation(dir, meta, sf, log); err != nil {
		return nil, errors.Join(err, meta.Close())
	}
	w, err := wal.Open(dir,
		wal.WithMetaStore(meta),
		wal.WithSegmentSize(walSegmentSize),
		wal.WithSegmentFiler(sf),
		wal.WithLogger(log),
	)
	if err != nil {
		err = errors.Join(fmt.Errorf("store: open wal %s: %w", dir, err), meta.Close())
		return nil, err
	}
	return &Stores{
		Log:    w,
		Stable: w,
		Close: sync.OnceValue(func() error {
			return errors.Join(w.Close(), meta.Close())
		}),
	}, nil
}

func openBolt(path string) (*Stores, error) {
	fi, err := os.Stat(path)
	created := errors.Is(err, os.ErrNotExist)
	switch {
	case err == nil && !fi.Mode().IsRegular():
		return nil, fmt.Errorf("store: %s exists and is not a regular file", path)
	case err != nil && !created:
		return nil, fmt.Errorf("store: %w", err)
	}
	opts := *bbolt.DefaultOptions
	opts.Timeout = boltLockTimeout
	b, err := raftboltdb.New(raftboltdb.Options{Path: path, BoltOptions: &opts})
	if errors.Is(err, bbolt.ErrTimeout) {
		return nil, fmt.Errorf("store: %s is locked: already open in this or another process", path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open bolt %s: %w", path, err)
	}
	if created {
		if err := syncDir(filepath.Dir(path)); err != nil {
			return nil, errors.Join(err, b.Close())
		}
	}
	return &Stores{Log: b, Stable: b, Close: sync.OnceValue(b.Close)}, nil
}
