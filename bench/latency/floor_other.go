//go:build !linux

package latency

import "os"

// datasync is the closest to fdatasync(2) the platform has.
func datasync(f *os.File) error { return f.Sync() }

// fsType is unknown off Linux.
func fsType(string) string { return "" }
