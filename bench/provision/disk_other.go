//go:build !linux

package provision

import "errors"

var errNoMount = errors.New("mounting a tmpfs needs Linux")

func mountTmpfs(string, int64) error { return errNoMount }

func unmount(string) error { return errNoMount }
