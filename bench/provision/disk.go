package provision

import (
	"errors"
	"fmt"
	"os"
	"sync"
)

// raftDiskSize is the size of node 1's data filesystem: room for a long
// campaign's log between snapshots (raft-wal's segments are 64 MiB files
// written as they fill), in memory only as far as it is used.
const raftDiskSize = 256 << 20

// CanMountTmpfs reports why a campaign cannot mount a tmpfs here, or nil.
// It tries once, on a temporary directory.
var CanMountTmpfs = sync.OnceValue(func() error {
	if os.Geteuid() != 0 {
		return errors.New("mounting node 1's data filesystem (a tmpfs) needs root")
	}
	dir, err := os.MkdirTemp("", "lockgate-mount-probe-")
	if err != nil {
		return err
	}
	defer os.Remove(dir)
	if err := mountTmpfs(dir, 1<<20); err != nil {
		return fmt.Errorf("cannot mount a tmpfs here: %w", err)
	}
	return unmount(dir)
})

// mountRaftDisk mounts a tmpfs of raftDiskSize on a new temporary
// directory and returns it with its unmount (which removes it too).
func mountRaftDisk() (string, func(), error) {
	dir, err := os.MkdirTemp("", "lockgate-raftdisk-")
	if err != nil {
		return "", nil, err
	}
	if err := mountTmpfs(dir, raftDiskSize); err != nil {
		os.Remove(dir)
		return "", nil, fmt.Errorf("bench: mounting node 1's data filesystem: %w", err)
	}
	return dir, func() {
		unmount(dir)
		os.Remove(dir)
	}, nil
}
