package servers

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// procHelperEnv selects what TestProcHelper does when the test binary runs
// itself as a child: "burn" (use procHelperBurn of CPU, then exit),
// "forever" (use CPU until killed), "reap" (run a burning child, reap it,
// write the file in procHelperMarkEnv, then sleep) or "detach" (start a
// child that uses CPU forever in a session of its own, as PostgreSQL's
// backends leave the postmaster's process group, then sleep).
const (
	procHelperEnv     = "LOCKGATE_PROCSTAT_HELPER"
	procHelperMarkEnv = "LOCKGATE_PROCSTAT_MARK"
	procHelperBurn    = 600 * time.Millisecond
)

// TestProcHelper is not a test: it is the child process of the tests
// below, and returns at once when run as a test.
func TestProcHelper(t *testing.T) {
	switch os.Getenv(procHelperEnv) {
	case "":
		return
	case "burn":
		burnCPU(procHelperBurn)
		os.Exit(0)
	case "forever":
		burnCPU(time.Hour)
		os.Exit(0)
	case "reap":
		c := helperCmd("burn")
		if err := c.Run(); err != nil {
			os.Exit(2)
		}
		if err := os.WriteFile(os.Getenv(procHelperMarkEnv), nil, 0o600); err != nil {
			os.Exit(3)
		}
		time.Sleep(time.Hour)
	case "detach":
		c := helperCmd("forever")
		c.SysProcAttr = &syscall.SysProcAttr{Setsid: true, Pdeathsig: syscall.SIGKILL}
		if err := c.Start(); err != nil {
			os.Exit(2)
		}
		time.Sleep(time.Hour)
	}
	os.Exit(1)
}

// burnCPU spins until the process has used d of CPU time.
func burnCPU(d time.Duration) {
	for {
		var ru syscall.Rusage
		if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
			return
		}
		used := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
		if used >= d {
			return
		}
		for i := 0; i < 1e6; i++ {
			_ = i * i
		}
	}
}

// helperCmd runs the test binary as TestProcHelper in mode.
func helperCmd(mode string) *exec.Cmd {
	c := exec.Command(os.Args[0], "-test.run=^TestProcHelper$")
	c.Env = append(os.Environ(), procHelperEnv+"="+mode)
	return c
}

// startHelper starts mode as the leader of a process group of its own, as
// proc.start starts a server, and kills what it started at the end.
func startHelper(t *testing.T, mode string, env ...string) *exec.Cmd {
	t.Helper()
	c := helperCmd(mode)
	c.Env = append(c.Env, env...)
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range descendants(c.Process.Pid) {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		_ = syscall.Kill(-c.Process.Pid, syscall.SIGKILL)
		_ = c.Wait()
	})
	return c
}

func mustTable(t *testing.T) *ProcTable {
	t.Helper()
	pt, err := ReadProcTable()
	if err != nil {
		t.Fatal(err)
	}
	return pt
}

// A worker that used CPU and was reaped still counts, in its parent's
// cutime and cstime: the tree's CPU grows by at least what it burned.
func TestTreeCountsReapedChildren(t *testing.T) {
	mark := filepath.Join(t.TempDir(), "reaped")
	c := startHelper(t, "reap", procHelperMarkEnv+"="+mark)
	pid := c.Process.Pid
	before, ok := mustTable(t).Tree(pid)
	if !ok {
		t.Fatalf("pid %d not in the table", pid)
	}
	deadline := time.Now().Add(60 * time.Second)
	for {
		if _, err := os.Stat(mark); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the burning child did not finish within 60 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	after, ok := mustTable(t).Tree(pid)
	if !ok {
		t.Fatalf("pid %d gone", pid)
	}
	if len(after.PIDs) != 1 {
		t.Errorf("tree %v after the child was reaped, want the leader alone", after.PIDs)
	}
	if got, want := after.CPU-before.CPU, procHelperBurn*8/10; got < want {
		t.Errorf("tree CPU grew by %v, want at least %v (the child burned %v)", got, want, procHelperBurn)
	}
	if after.RSS <= 0 || after.HWM < after.RSS {
		t.Errorf("memory: rss %d, hwm %d: want 0 < rss <= hwm", after.RSS, after.HWM)
	}
}

// A live descendant that left the leader's process group (setsid, as
// PostgreSQL's backends do) is part of the tree, and its CPU counts.
func TestTreeCountsDetachedDescendants(t *testing.T) {
	c := startHelper(t, "detach")
	pid := c.Process.Pid
	start := time.Now()
	before, _ := mustTable(t).Tree(pid)
	deadline := start.Add(60 * time.Second)
	for {
		pt := mustTable(t)
		u, ok := pt.Tree(pid)
		if !ok {
			t.Fatalf("pid %d gone", pid)
		}
		if len(u.PIDs) == 2 && u.CPU-before.CPU >= 300*time.Millisecond {
			child := u.PIDs[1]
			if pe := pt.procs[child]; pe.pgid == pid {
				t.Errorf("child %d is in the leader's group %d: the test meant it to leave it", child, pe.pgid)
			}
			own, ok := pt.CPU(child)
			if !ok || own < 200*time.Millisecond {
				t.Errorf("the detached child's own CPU is %v (ok %v), want at least 200ms of the tree's %v", own, ok, u.CPU-before.CPU)
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 60 s: tree %v with %v of CPU; want the detached child and 300ms", u.PIDs, u.CPU-before.CPU)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestParseProcStat(t *testing.T) {
	// comm with spaces and parentheses; utime 7, stime 3, cutime 20, cstime 5.
	line := "4242 (a (b) c) S 1 4242 4242 0 -1 4194560 100 0 0 0 7 3 20 5 20 0 1 0 123 456 789\n"
	pe, ok := parseProcStat([]byte(line))
	if !ok {
		t.Fatal("not parsed")
	}
	if pe.state != 'S' || pe.ppid != 1 || pe.pgid != 4242 || pe.own != 10 || pe.cpu != 35 {
		t.Errorf("parsed %+v", pe)
	}
	if _, ok := parseProcStat([]byte(strings.TrimSuffix(line, " 20 5 20 0 1 0 123 456 789\n"))); ok {
		t.Error("a line cut before cutime parsed")
	}
	if got := TicksDuration(35); got != 350*time.Millisecond {
		t.Errorf("35 ticks = %v", got)
	}
}
