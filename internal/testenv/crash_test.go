package testenv

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestCrashHelper is the child half of TestServersDieWithTestBinary: with
// TESTENV_CRASH_HELPER=1 it starts servers, pauses them, prints their PIDs
// and waits to be SIGKILLed. Otherwise it does nothing.
func TestCrashHelper(t *testing.T) {
	if os.Getenv("TESTENV_CRASH_HELPER") != "1" {
		return
	}
	pg := StartPostgres(t)
	r := StartRedis(t)
	pids := append([]int{pg.PID(), r.PID()}, descendants(pg.PID())...)
	pg.Pause() // stopped backends are the hard case: see startGuardLocked
	r.Pause()
	var s []string
	for _, pid := range pids {
		s = append(s, strconv.Itoa(pid))
	}
	fmt.Printf("\nTESTENV_PIDS: %s\n", strings.Join(s, " "))
	time.Sleep(time.Minute)
	t.Fatal("not killed")
}

// TestServersDieWithTestBinary SIGKILLs a test binary that has paused
// servers running (so no cleanup runs) and checks that the servers and all
// their workers die anyway.
func TestServersDieWithTestBinary(t *testing.T) {
	t.Parallel()
	PostgresBinDir(t)
	RequireBinary(t, "redis-server", "redis-server")
	// The helper's server directories go here, as its own cleanup will not
	// run. World-traversable: postgres may run as another user.
	tmp, err := os.MkdirTemp("", "testenv-crash-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashHelper$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "TESTENV_CRASH_HELPER=1", "TMPDIR="+tmp)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	defer func() {
		if !killed {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()

	var pids []int
	var log []string
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line := sc.Text()
		log = append(log, line)
		if rest, ok := strings.CutPrefix(line, "TESTENV_PIDS: "); ok {
			for _, f := range strings.Fields(rest) {
				pid, _ := strconv.Atoi(f)
				pids = append(pids, pid)
			}
			break
		}
	}
	if len(pids) < 3 {
		t.Fatalf("helper printed no PIDs; its output:\n%s", strings.Join(log, "\n"))
	}
	for _, pid := range pids {
		if st, ok := procStat(pid); !ok || st.state != 'T' {
			t.Fatalf("process %d not stopped before the crash (state %c)", pid, st.state)
		}
	}
	go func() { // keep draining, so nothing blocks on a full pipe
		for sc.Scan() {
		}
	}()
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	killed = true

	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for {
			st, ok := procStat(pid)
			if !ok || st.state == 'Z' || st.state == 'X' {
				break
			}
			if time.Now().After(deadline) {
				t.Errorf("process %d still alive (state %c) 10s after the test binary was killed", pid, st.state)
				syscall.Kill(pid, syscall.SIGKILL)
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
