package fencedstore

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// openFile opens the data file for reading and appending and locks it
// against a second Open. A missing file is created with its header
// atomically (temporary file, fsync, rename, fsync of the directory), so a
// crash never leaves a half-written header; an existing empty file gets its
// header in place.
func openFile(path string) (*os.File, error) {
	if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
		if err := createFile(path); err != nil {
			return nil, fmt.Errorf("fencedstore: create %s: %w", path, err)
		}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_APPEND, 0)
	if err != nil {
		return nil, fmt.Errorf("fencedstore: %w", err)
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("fencedstore: %s: %w", path, err)
	}
	fi, err := f.Stat()
	if err == nil && fi.Size() == 0 {
		if _, err = f.Write(newHeader()); err == nil {
			err = f.Sync()
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("fencedstore: %s: %w", path, err)
	}
	return f, nil
}

func newHeader() []byte {
	var b [8]byte
	rand.Read(b[:])
	return encodeHeader(binary.LittleEndian.Uint64(b[:]))
}

func createFile(path string) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".new-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // fails harmlessly after the rename
	if _, err := tmp.Write(newHeader()); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return err
	}
	return nil
}
