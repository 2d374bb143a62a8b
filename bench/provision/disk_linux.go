package provision

import (
	"fmt"
	"syscall"
)

func mountTmpfs(dir string, size int64) error {
	return syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_NOSUID|syscall.MS_NODEV, fmt.Sprintf("size=%d,mode=0700", size))
}

func unmount(dir string) error { return syscall.Unmount(dir, 0) }
