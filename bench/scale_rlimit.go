package bench

import "syscall"

// raiseNoFile raises this process's open-files limit to its hard limit:
// a scale run opens a connection per waiter, and the `lockgate node`
// processes it starts inherit the limit.
func raiseNoFile() error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= lim.Max {
		return nil
	}
	lim.Cur = lim.Max
	return syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim)
}
