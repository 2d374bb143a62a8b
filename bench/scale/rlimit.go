package scale

import (
	"fmt"
	"syscall"
)

// raiseNoFile raises this process's open-files limit to at least need: a
// scale run opens a connection per waiter, in the bench and in the
// `lockgate node` processes it starts, which inherit the limit. It raises
// the soft limit to the hard one, and the hard one too where the process
// may (it needs CAP_SYS_RESOURCE). It returns the limit now in force,
// which may stay below need: the waiters phase then shares connections
// (see raftScale.waiters).
func raiseNoFile(need uint64) (uint64, error) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		return 0, err
	}
	if lim.Max < need {
		up := syscall.Rlimit{Cur: need, Max: need}
		if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) == nil {
			return need, nil
		}
	}
	if lim.Cur < lim.Max {
		lim.Cur = lim.Max
		if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
			return lim.Max, fmt.Errorf("raising the open-files limit to %d: %w", lim.Max, err)
		}
	}
	return lim.Cur, nil
}
