package faults

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// The disk-full fault: node 1's data directory lives on a small tmpfs that
// the campaign mounts (Provision, with Faults, when it can mount: as root,
// on Linux); the fault fills that filesystem with a file and the heal
// deletes it. A tmpfs and not a loop-mounted image: it needs no loop
// device (often missing in containers) and no mkfs, and it fills the same
// way (ENOSPC on the next write or fsync). Its data outlives a SIGKILL of
// the node, as a disk's would; it is lost only at unmount.

// diskFullFile is the file that fills the filesystem.
const diskFullFile = "lockgate-disk-full"

// raftDiskFull fills node 1's data filesystem; the heal frees it and, if
// the node exited on the full disk (a failed write to its log), starts it
// again from its data directory.
func raftDiskFull(env Env, _ *rand.Rand, _ time.Duration) (func() error, string, error) {
	dir := env.S.RaftDiskDir
	if dir == "" {
		return nil, "", fmt.Errorf("%w: disk-full on raft: node 1's data directory is on no filesystem of its own", ErrUnavailable)
	}
	nd := env.S.RaftProcs.Nodes[0]
	path := filepath.Join(dir, diskFullFile)
	n, err := fill(path)
	if err != nil {
		os.Remove(path)
		return nil, "", err
	}
	heal := func() error {
		if err := os.Remove(path); err != nil {
			return err
		}
		if nd.PID() == 0 {
			return healing("restarting node "+nd.ID+" after its disk filled", nd.Restart)
		}
		return nil
	}
	return heal, fmt.Sprintf("node %s's data filesystem filled (%d MiB written until ENOSPC)", nd.ID, n>>20), nil
}

// fill writes zeros to path until the filesystem is full and returns how
// many bytes it wrote.
func fill(path string) (int64, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o600)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	var n int64
	for {
		k, err := f.Write(buf)
		n += int64(k)
		if errors.Is(err, syscall.ENOSPC) {
			break
		}
		if err != nil {
			return n, fmt.Errorf("filling %s: %w", path, err)
		}
	}
	// A last byte at a time, so that no page is left for the node.
	for {
		if _, err := f.Write([]byte{0}); err != nil {
			break
		}
		n++
	}
	return n, f.Sync()
}
