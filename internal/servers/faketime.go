package servers

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// libfaketimePaths are where Debian's faketime package puts the library.
var libfaketimePaths = []string{
	"/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/aarch64-linux-gnu/faketime/libfaketime.so.1",
	"/usr/lib/faketime/libfaketime.so.1",
}

// FakeClock shifts the wall clock of C programs started with its Env,
// through libfaketime (Debian package faketime): the offset is read from a
// file at most once a second, so Jump takes effect within a second. The
// monotonic clock is left alone, as a real wall-clock step leaves it. It
// does not work on Go binaries, nor on programs linked with jemalloc
// (redis-server: wolfcw/libfaketime#130). Close removes its offset file.
type FakeClock struct {
	lib, dir, file string
	offset         time.Duration
}

// NewFakeClock returns a FakeClock at offset zero, or a *MissingError
// (ErrNotInstalled) if libfaketime is not installed.
func NewFakeClock() (*FakeClock, error) {
	var lib string
	for _, p := range libfaketimePaths {
		if _, err := os.Stat(p); err == nil {
			lib = p
			break
		}
	}
	if lib == "" {
		return nil, &MissingError{What: "libfaketime", Package: "faketime"}
	}
	dir, err := os.MkdirTemp("", "lockgate-faketime-")
	if err != nil {
		return nil, fmt.Errorf("servers: NewFakeClock: %w", err)
	}
	c := &FakeClock{lib: lib, dir: dir, file: filepath.Join(dir, "offset")}
	// Readable by the unprivileged user PostgreSQL runs as.
	if err := os.Chmod(dir, 0o755); err != nil {
		c.Close()
		return nil, fmt.Errorf("servers: NewFakeClock: %w", err)
	}
	if err := c.Set(0); err != nil {
		c.Close()
		return nil, fmt.Errorf("servers: NewFakeClock: %w", err)
	}
	return c, nil
}

// Close removes the clock's offset file; programs under it then see the
// real time.
func (c *FakeClock) Close() { os.RemoveAll(c.dir) }

// Env is the environment that puts a program under this clock.
func (c *FakeClock) Env() []string {
	return []string{
		"LD_PRELOAD=" + c.lib,
		"FAKETIME_TIMESTAMP_FILE=" + c.file,
		"FAKETIME_CACHE_DURATION=1",
		"FAKETIME_DONT_FAKE_MONOTONIC=1",
	}
}

// Set sets the offset from the real wall clock (whole seconds).
func (c *FakeClock) Set(d time.Duration) error {
	tmp := c.file + ".tmp"
	if err := os.WriteFile(tmp, fmt.Appendf(nil, "%+d\n", int64(d/time.Second)), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, c.file); err != nil {
		return err
	}
	c.offset = d
	return nil
}

// Jump moves the clock forward by d (whole seconds) from where it is.
func (c *FakeClock) Jump(d time.Duration) error { return c.Set(c.offset + d) }

// Offset is the current offset.
func (c *FakeClock) Offset() time.Duration { return c.offset }
