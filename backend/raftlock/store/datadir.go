package store

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	walfs "github.com/hashicorp/raft-wal/fs"
	"github.com/hashicorp/raft-wal/types"
)

// LockFileName is the lock file at the top of a data directory. Open takes
// an exclusive flock on it before it opens anything else, whatever the
// Kind, and holds it until Close: one node per data directory, also across
// store kinds and for the snapshots beside the log.
const LockFileName = "LOCK"

// Modes of everything lockgate keeps in a data directory, whoever created
// the directory and whatever the process umask: the log, the snapshots and
// the stable store hold every lease's secret handle.
const (
	DirMode  fs.FileMode = 0o700
	FileMode fs.FileMode = 0o600
)

var (
	// ErrLocked is wrapped by the error Open returns when another node
	// (in this or another process) holds the data directory.
	ErrLocked = errors.New("store: data directory in use")
	// ErrOtherKind is wrapped by the error Open returns when the data
	// directory holds the log of the other store kind.
	ErrOtherKind = errors.New("store: data directory holds another store kind")
)

// LockedError says which lock file is held, and by which process if known.
type LockedError struct {
	Path string // the lock file
	PID  int    // the holder's process id as it recorded it; 0 if unknown
}

func (e *LockedError) Error() string {
	who := "another lockgate node"
	switch {
	case e.PID == os.Getpid():
		who = "this process (a node already open on it)"
	case e.PID > 0:
		who = fmt.Sprintf("another lockgate node (pid %d)", e.PID)
	}
	return fmt.Sprintf("store: data directory %s is locked: in use by %s; lock file %s",
		filepath.Dir(e.Path), who, e.Path)
}

// Unwrap makes the error match ErrLocked.
func (e *LockedError) Unwrap() error { return ErrLocked }

// checkKind refuses a data directory that holds the other kind's log:
// opening it would start an empty log beside it and, with --bootstrap, a
// second cluster in the same directory.
func checkKind(dir string, kind Kind) error {
	other, name := KindBolt, boltFileName
	if kind == KindBolt {
		other, name = KindWAL, walDirName
	}
	p := filepath.Join(dir, name)
	if _, err := os.Lstat(p); err == nil {
		return fmt.Errorf("%w: %s holds a --store %s log (%s); refusing to open it as --store %s "+
			"(start the node with --store %s, or use another --data-dir)", ErrOtherKind, dir, other, p, kind, other)
	} else if !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("store: %w", err)
	}
	return nil
}

// Tighten sets every directory under root (root included) to DirMode and
// every regular file to FileMode. Open runs it over the data directory;
// the snapshot store over each snapshot it writes.
func Tighten(root string) error {
	return filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return fmt.Errorf("store: tighten permissions: %w", err)
		}
		mode := FileMode
		switch {
		case d.IsDir():
			mode = DirMode
		case !d.Type().IsRegular():
			return nil // symlinks and the like: not ours to change
		}
		info, err := d.Info()
		if err != nil {
			return fmt.Errorf("store: tighten permissions: %w", err)
		}
		if info.Mode().Perm() == mode {
			return nil
		}
		if err := os.Chmod(path, mode); err != nil {
			return fmt.Errorf("store: tighten permissions of %s: %w", path, err)
		}
		return nil
	})
}

// privateFS is raft-wal's file system with segment files created FileMode
// rather than 0644: raft-wal creates a new segment whenever one fills, long
// after Open's sweep.
type privateFS struct{ *walfs.FS }

func (p privateFS) Create(dir, name string, size uint64) (types.WritableFile, error) {
	f, err := p.FS.Create(dir, name, size)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(filepath.Join(dir, name), FileMode); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: %w", err)
	}
	return f, nil
}
