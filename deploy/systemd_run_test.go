package deploy

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
)

// nodeArgs returns a `lockgate node` command line on two free 127.0.0.1
// ports, and its API address.
func nodeArgs(t *testing.T, id int, dataDir string, extra ...string) ([]string, string) {
	t.Helper()
	var ports [2]int
	for i := range ports {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer l.Close()
		ports[i] = l.Addr().(*net.TCPAddr).Port
	}
	api := fmt.Sprintf("127.0.0.1:%d", ports[1])
	args := append([]string{"node", "--id", strconv.Itoa(id), "--data-dir", dataDir,
		"--raft-addr", fmt.Sprintf("127.0.0.1:%d", ports[0]), "--api-addr", api}, extra...)
	return args, api
}

// awaitReady polls a node's /readyz until it answers 200, the process
// exits (exited closes) or 30 s pass.
func awaitReady(t *testing.T, api string, exited <-chan struct{}) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := http.Get("http://" + api + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case <-exited:
			t.Fatalf("the node on %s exited before it was ready", api)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("the node on %s not ready within 30 s", api)
		}
	}
}

// tracedNode is a `lockgate node` run under strace -f -c (a count of the
// system calls of all its threads, written when it exits).
type tracedNode struct {
	cmd    *exec.Cmd
	out    *bytes.Buffer
	counts string
	exited chan struct{}
}

func startTraced(t *testing.T, strace, bin string, args []string) *tracedNode {
	t.Helper()
	n := &tracedNode{counts: filepath.Join(t.TempDir(), "syscalls"), out: &bytes.Buffer{}, exited: make(chan struct{})}
	n.cmd = exec.Command(strace, append([]string{"-f", "-c", "-U", "name", "-o", n.counts, "--", bin}, args...)...)
	n.cmd.Stdout, n.cmd.Stderr = n.out, n.out
	if err := n.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { n.cmd.Wait(); close(n.exited) }()
	t.Cleanup(func() {
		n.cmd.Process.Kill()
		<-n.exited
	})
	return n
}

// stop sends SIGTERM to the traced lockgate (strace's child, which
// strace passes it to) and returns the system calls it made.
func (n *tracedNode) stop(t *testing.T) []string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", n.cmd.Process.Pid, n.cmd.Process.Pid))
	child, err2 := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || err2 != nil {
		t.Fatalf("strace's child: %q %v %v", data, err, err2)
	}
	syscall.Kill(child, syscall.SIGTERM)
	select {
	case <-n.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("lockgate did not stop within 30 s of SIGTERM:\n%s", n.out)
	}
	if !n.cmd.ProcessState.Success() {
		t.Errorf("lockgate under strace: %v\n%s", n.cmd.ProcessState, n.out)
	}
	table, err := os.ReadFile(n.counts)
	if err != nil {
		t.Fatal(err)
	}
	var calls []string
	for _, l := range strings.Split(string(table), "\n") {
		f := strings.Fields(l)
		if len(f) == 1 && f[0] != "syscall" && f[0] != "total" && !strings.HasPrefix(f[0], "-") {
			calls = append(calls, f[0])
		}
	}
	if len(calls) < 20 {
		t.Fatalf("strace counted %d system calls: the parse is broken:\n%s", len(calls), table)
	}
	return calls
}

// TestSystemdSyscallFilter: every system call a `lockgate node` makes —
// started under strace, bootstrapping a cluster that a second traced node
// joins (Raft replication), granting, renewing and releasing a lock,
// answering a conflict, taking a snapshot, serving /metrics, stopping on
// SIGTERM with a leadership handover — is allowed by the unit's
// SystemCallFilter lines as systemd expands them. A call outside it would
// fail with EPERM (SystemCallErrorNumber) in production only.
func TestSystemdSyscallFilter(t *testing.T) {
	sa := testenv.RequireBinary(t, "systemd-analyze", "systemd")
	strace := testenv.RequireBinary(t, "strace", "strace")
	if out, err := exec.Command(strace, "-f", "-qq", "-o", os.DevNull, "--", "/bin/true").CombinedOutput(); err != nil {
		t.Skipf("strace cannot trace here (no ptrace in this container?): %v %s", err, out)
	}
	allowed := syscallFilter(t, syscallGroups(t, sa), values(readUnit(t, unitFile), "Service", "SystemCallFilter"))
	bin := testenv.BuildLockgate(t)

	args1, api1 := nodeArgs(t, 1, t.TempDir(), "--bootstrap")
	n1 := startTraced(t, strace, bin, args1)
	awaitReady(t, api1, n1.exited)
	args2, api2 := nodeArgs(t, 2, t.TempDir(), "--join", api1)
	n2 := startTraced(t, strace, bin, args2)
	awaitReady(t, api2, n2.exited)

	base := "http://" + api1
	if c := restCall(t, http.MethodPost, base+"/locks/k", `{"ttl_ms": 10000}`); c != http.StatusOK {
		t.Fatalf("acquire: %d", c)
	}
	if c := restCall(t, http.MethodPost, base+"/locks/k", `{"ttl_ms": 10000}`); c != http.StatusConflict {
		t.Errorf("acquire of a held key: %d, want 409", c)
	}
	if c := restCall(t, http.MethodPost, base+"/v1/cluster/snapshot", `{}`); c != http.StatusOK {
		t.Logf("snapshot: %d (its system calls are not covered)", c)
	}
	for _, api := range []string{api1, api2} {
		scrape(t, "http://"+api+"/metrics")
	}

	var used []string
	for _, n := range []*tracedNode{n1, n2} { // the leader first: it hands over
		used = append(used, n.stop(t)...)
	}
	var denied []string
	for _, c := range used {
		if !allowed(c) && !slices.Contains(denied, c) {
			denied = append(denied, c)
		}
	}
	sort.Strings(denied)
	if len(denied) > 0 {
		t.Errorf("lockgate node made system calls that %s's SystemCallFilter refuses: %s", unitFile, strings.Join(denied, " "))
	}
	t.Run("detects-refused", func(t *testing.T) {
		if allowed("reboot") || allowed("setuid") || !allowed("fdatasync") {
			t.Errorf("the filter's evaluation is wrong: reboot %v, setuid %v, fdatasync %v", allowed("reboot"), allowed("setuid"), allowed("fdatasync"))
		}
	})
}

// TestSystemdTransientUnit starts a node as a transient systemd unit with
// the unit file's hardening (systemd-run --user), where a systemd user
// manager runs; this machine's containers have none, and the test says so.
func TestSystemdTransientUnit(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		pid1, _ := os.ReadFile("/proc/1/comm")
		t.Skipf("systemd is not running on this machine (no /run/systemd/system; PID 1 is %q): a transient unit cannot be started; systemd-analyze verify covers the unit file", strings.TrimSpace(string(pid1)))
	}
	run := testenv.RequireBinary(t, "systemd-run", "systemd")
	if out, err := exec.Command("systemctl", "--user", "is-system-running").Output(); err != nil && !strings.Contains(string(out), "degraded") {
		t.Skipf("no systemd user manager (systemctl --user is-system-running: %q %v)", strings.TrimSpace(string(out)), err)
	}
	rt := os.Getenv("XDG_RUNTIME_DIR")
	if rt == "" {
		t.Skip("XDG_RUNTIME_DIR is not set: no user manager to talk to")
	}
	// The unit's [Service] hardening, but for what only a system unit
	// may have (User, Group) and the paths: the data directory is a
	// RuntimeDirectory (under XDG_RUNTIME_DIR, outside /tmp and /home
	// which the unit hides), removed when the unit stops.
	name := fmt.Sprintf("lockgate-test-%d", os.Getpid())
	var props []string
	for _, u := range readUnit(t, unitFile) {
		switch {
		case u.section != "Service", u.key == "ExecStart", u.key == "ExecReload", u.key == "Type",
			u.key == "User", u.key == "Group", u.key == "StateDirectory", u.key == "StateDirectoryMode", u.key == "ReadWritePaths":
		default:
			props = append(props, "-p", u.key+"="+u.value)
		}
	}
	props = append(props, "-p", "RuntimeDirectory="+name, "-p", "Type=exec")
	bin := testenv.BuildLockgate(t)
	args, api := nodeArgs(t, 1, filepath.Join(rt, name), "--bootstrap")
	cmd := exec.Command(run, append(append([]string{"--user", "--wait", "--collect", "--unit", name}, props...), append([]string{bin}, args...)...)...)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		exec.Command("systemctl", "--user", "stop", name).Run()
		<-exited
	})
	awaitReady(t, api, exited)
	if c := restCall(t, http.MethodPost, "http://"+api+"/locks/k", `{"ttl_ms": 10000}`); c != http.StatusOK {
		t.Errorf("acquire in the sandbox: %d", c)
	}
	if err := exec.Command("systemctl", "--user", "stop", name).Run(); err != nil {
		t.Fatal(err)
	}
	<-exited
	if !cmd.ProcessState.Success() {
		t.Errorf("the node under the transient unit did not stop cleanly: %v\n%s", cmd.ProcessState, out.String())
	}
}
