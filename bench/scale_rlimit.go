package bench

import (
	"fmt"
	"syscall"
)

// raiseNoFile raises this process's open-files limit to at least need: a
// scale run opens a connection per waiter, in the bench and in the
// `lockgate node` processes it starts, which inherit the limit. It raises
// the soft limit to the hard one, and the hard one too where the process
// may (root); it fails when the limit stays below need.
func raiseNoFile(need uint64) error {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Max < need {
		up := syscall.Rlimit{Cur: need, Max: need}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			return nil
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return err
		}
	}
	if lim.Cur < need {
		return fmt.Errorf("the open-files limit is %d, this run needs about %d (a connection per waiter, in the bench and in the leader): raise it (ulimit -n) or lower --waiters", lim.Cur, need)
	}
	return nil
}
