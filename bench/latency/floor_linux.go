package latency

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"
)

// datasync is fdatasync(2): the file's data and the metadata needed to read
// it back (its size, after an append), as etcd's WAL, bbolt and PostgreSQL
// (wal_sync_method's Linux default) sync.
func datasync(f *os.File) error { return unix.Fdatasync(int(f.Fd())) }

// fsTypes names the filesystems whose magic numbers statfs(2) returns that
// a data directory is likely to be on.
var fsTypes = map[int64]string{
	unix.EXT4_SUPER_MAGIC:      "ext4",
	unix.XFS_SUPER_MAGIC:       "xfs",
	unix.BTRFS_SUPER_MAGIC:     "btrfs",
	unix.TMPFS_MAGIC:           "tmpfs",
	unix.OVERLAYFS_SUPER_MAGIC: "overlayfs",
	unix.F2FS_SUPER_MAGIC:      "f2fs",
	unix.NFS_SUPER_MAGIC:       "nfs",
	unix.FUSE_SUPER_MAGIC:      "fuse",
}

// fsType names the filesystem dir is on ("" when statfs fails).
func fsType(dir string) string {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return ""
	}
	if name, ok := fsTypes[int64(st.Type)]; ok {
		return name
	}
	return fmt.Sprintf("0x%x", st.Type)
}
