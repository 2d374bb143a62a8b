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
	// directory holds the log of the other store kind than the one asked
	// for, or, with KindAuto, the logs of both kinds.
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

// kindFiles maps each concrete kind to the name of its log in a data
// directory.
var kindFiles = map[Kind]string{KindWAL: walDirName, KindBolt: boltFileName}

// resolveKind returns the kind to open in dir and why. An explicit kind is
// refused if dir holds the other kind's log: opening it would start an
// empty log beside it and, with --bootstrap, a second cluster in the same
// directory. KindAuto takes the kind dir holds, Default if none, and
// refuses to guess between two.
func resolveKind(dir string, kind Kind) (Kind, string, error) {
	var found []Kind // in kinds' order
	for _, k := range kinds {
		name, ok := kindFiles[k]
		if !ok {
			continue
		}
		if _, err := os.Lstat(filepath.Join(dir, name)); err == nil {
			found = append(found, k)
		} else if !errors.Is(err, os.ErrNotExist) {
			return "", "", fmt.Errorf("store: %w", err)
		}
	}
	if kind != KindAuto {
		for _, other := range found {
			if other != kind {
				p := filepath.Join(dir, kindFiles[other])
				return "", "", fmt.Errorf("%w: %s holds a --store %s log (%s); refusing to open it as --store %s "+
					"(start the node with --store %s or --store %s, or use another --data-dir)",
					ErrOtherKind, dir, other, p, kind, other, KindAuto)
			}
		}
		return kind, fmt.Sprintf("--store %s asked for", kind), nil
	}
	switch len(found) {
	case 0:
		return Default, fmt.Sprintf("--store %s: %s holds no Raft log yet; a new directory gets the default, %s",
			KindAuto, dir, Default), nil
	case 1:
		k := found[0]
		return k, fmt.Sprintf("--store %s: %s holds a %s log (%s)", KindAuto, dir, k, filepath.Join(dir, kindFiles[k])), nil
	}
	return "", "", fmt.Errorf("%w: %s holds both a --store %s log (%s) and a --store %s log (%s); "+
		"refusing to guess which one is the node's: move the one not in use out of the directory",
		ErrOtherKind, dir, found[0], filepath.Join(dir, kindFiles[found[0]]), found[1], filepath.Join(dir, kindFiles[found[1]]))
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
