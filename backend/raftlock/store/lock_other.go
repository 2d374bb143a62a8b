//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package store

// lockFile is a no-op where flock is unavailable; bbolt's own lock on its
// file still guards against two writers of one store kind.
func lockFile(string) (func() error, error) {
	return func() error { return nil }, nil
}
