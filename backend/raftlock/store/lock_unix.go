//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
)

// lockFile takes an exclusive flock on path, creating it 0600, without
// waiting, and records this process's PID in it so that the error a second
// node gets can name the holder. The returned function releases it.
func lockFile(path string) (unlock func() error, err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("store: lock: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, &LockedError{Path: path, PID: lockHolder(path)}
		}
		return nil, fmt.Errorf("store: lock %s: %w", path, err)
	}
	// The PID is information for the error message only: the flock, not
	// the file's content, is the lock, so a stale PID left by a crashed
	// node is harmless.
	if err := f.Truncate(0); err == nil {
		f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	// Closing the descriptor releases the lock.
	return f.Close, nil
}

// lockHolder reads the PID the lock's holder wrote, 0 if unknown.
func lockHolder(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}
