package testenv

import (
	"errors"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/servers"
)

// requireGone fails unless no process with this PID exists any more.
func requireGone(t *testing.T, what string, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("%s: bad pid %d", what, pid)
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		t.Errorf("%s: process %d still exists (kill -0: %v)", what, pid, err)
	}
}

// requireDead fails unless each pid is gone or a zombie (dead, but not yet
// reaped by init after its parent died). Use it for processes that are not
// our children, such as postgres backends.
func requireDead(t *testing.T, what string, pids []int) {
	t.Helper()
	for _, pid := range pids {
		if st, ok := procStat(pid); ok && st.state != 'Z' && st.state != 'X' {
			t.Errorf("%s: process %d still alive (state %c)", what, pid, st.state)
		}
	}
}

// requireWorkers returns the descendants of pid, failing if there are none.
func requireWorkers(t *testing.T, pid int) []int {
	t.Helper()
	d := descendants(pid)
	if len(d) == 0 {
		t.Fatalf("process %d has no child processes", pid)
	}
	return d
}

// requireAlive fails unless pid exists.
func requireAlive(t *testing.T, what string, pid int) {
	t.Helper()
	if pid <= 0 {
		t.Fatalf("%s: PID() = %d, want a running process", what, pid)
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("%s: process %d is not alive: %v", what, pid, err)
	}
}

// requireRefused fails unless a TCP connection to addr is refused.
func requireRefused(t *testing.T, addr string) {
	t.Helper()
	addr = strings.TrimPrefix(addr, "http://")
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err == nil {
		c.Close()
		t.Errorf("connection to %s succeeded, want refused", addr)
		return
	}
	if !errors.Is(err, syscall.ECONNREFUSED) {
		t.Errorf("connection to %s: %v, want connection refused", addr, err)
	}
}

// The /proc readers of internal/servers, under the names these tests used
// when the process management lived in this package.

type stat struct{ state byte }

func procStat(pid int) (stat, bool) {
	s, ok := servers.ProcState(pid)
	return stat{state: s}, ok
}

func descendants(pid int) []int { return servers.Descendants(pid) }

func isStopped(pid int) bool {
	s, ok := servers.ProcState(pid)
	return ok && s == 'T'
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
