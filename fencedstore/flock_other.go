//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package fencedstore

import "os"

// lockFile is a no-op where flock is unavailable.
func lockFile(*os.File) error { return nil }
