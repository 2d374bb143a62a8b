package cli

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
)

// TestPrimitivesAsProcesses drives `lockgate run --shared`, `run --permits`,
// `elect` and `observe` as processes against a three-node raftlock cluster
// of `lockgate node` processes: what a user types, end to end.
func TestPrimitivesAsProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a three-node cluster")
	}
	bin := testenv.BuildLockgate(t)
	cluster := testenv.StartRaftlock(t, bin, 3)
	eps := strings.Join(cluster.APIAddrs, ",")
	p := &procs{t: t, bin: bin, eps: eps, dir: t.TempDir()}

	t.Run("shared", func(t *testing.T) {
		p.t = t
		// Two shared holders at once: each waits for the other's file
		// before it exits, which only two simultaneous holders can do.
		a := p.start("run", "--key", "rw", "--shared", "--ttl", "5s", "--", "sh", "-c", p.script("touch a; until [ -e b ]; do sleep 0.01; done; until [ -e go ]; do sleep 0.01; done"))
		b := p.start("run", "--key", "rw", "--shared", "--ttl", "5s", "--", "sh", "-c", p.script("touch b; until [ -e a ]; do sleep 0.01; done"))
		p.awaitFile("a")
		p.awaitFile("b")
		b.wait(0)
		// An exclusive holder waits for the remaining reader.
		w := p.start("run", "--key", "rw", "--ttl", "5s", "--", "sh", "-c", p.script("touch w"))
		p.awaitWaiters("rw", 1)
		if p.exists("w") {
			t.Fatal("the exclusive run ran while a shared holder held the key")
		}
		p.touch("go")
		a.wait(0)
		w.wait(0)
	})

	t.Run("permits", func(t *testing.T) {
		p.t = t
		var runs []*proc
		for _, n := range []string{"p1", "p2", "p3"} {
			runs = append(runs, p.start("run", "--key", "sem", "--permits", "2", "--ttl", "5s", "--", "sh", "-c",
				p.script("touch "+n+"; until [ -e "+n+".done ]; do sleep 0.01; done")))
			if n != "p3" {
				p.awaitFile(n)
			}
		}
		p.awaitWaiters("sem", 1)
		if p.exists("p3") {
			t.Fatal("a third holder ran on a semaphore of 2 permits")
		}
		p.touch("p1.done")
		runs[0].wait(0)
		p.awaitFile("p3")
		p.touch("p2.done")
		p.touch("p3.done")
		runs[1].wait(0)
		runs[2].wait(0)
		// A conflicting N is refused at once, not queued.
		hold := p.start("run", "--key", "sem", "--permits", "2", "--ttl", "5s", "--", "sh", "-c", p.script("touch h; until [ -e h.done ]; do sleep 0.01; done"))
		p.awaitFile("h")
		bad := p.start("run", "--key", "sem", "--permits", "3", "--wait", "30s", "--", "true")
		if code := bad.wait(-1); code == 0 || !strings.Contains(bad.stderr(), "permits") {
			t.Errorf("run --permits 3 on a key held with 2: exit %d, stderr %q", code, bad.stderr())
		}
		p.touch("h.done")
		hold.wait(0)
	})

	t.Run("elect-observe", func(t *testing.T) {
		p.t = t
		obs := p.start("observe", "--key", "election", "--json")
		first := obs.line()
		if first.Leader {
			t.Fatalf("observe's first report %+v, want no leader", first)
		}
		// a.lead is written aside and renamed: awaitFile sees a file once it
		// exists, and a file being written can exist empty.
		a := p.start("elect", "--key", "election", "--value", "a", "--ttl", "2s", "--", "sh", "-c", p.script(`echo "$LOCKGATE_LEADER_VALUE $LOCKGATE_FENCING_TOKEN" > a.tmp && mv a.tmp a.lead; exec sleep 600`))
		la := obs.line()
		if !la.Leader || la.Value != "a" {
			t.Fatalf("observe after a's campaign: %+v", la)
		}
		p.awaitFile("a.lead")
		if got := p.read("a.lead"); got != "a "+jsonNum(la.FencingToken) {
			t.Errorf("a's command saw %q, want value and token %q", got, "a "+jsonNum(la.FencingToken))
		}
		b := p.start("elect", "--key", "election", "--value", "b", "--ttl", "2s", "--", "sh", "-c", p.script(`touch b.lead; exec sleep 600`))
		p.awaitWaiters("election", 1)
		if p.exists("b.lead") {
			t.Fatal("b leads while a leads")
		}
		// a's process dies without resigning: b leads once a's lease runs out.
		a.kill()
		lb := obs.line()
		if !lb.Leader { // a's expiry, reported before the grant to b
			lb = obs.line()
		}
		if !lb.Leader || lb.Value != "b" || lb.FencingToken <= la.FencingToken {
			t.Fatalf("observe after a was killed: %+v (a was %+v)", lb, la)
		}
		p.awaitFile("b.lead")
		// b is asked to stop: its command ends, it resigns, nobody leads.
		b.signal(syscall.SIGTERM)
		b.wait(-1)
		if l := obs.line(); l.Leader {
			t.Fatalf("observe after b resigned: %+v, want no leader", l)
		}
	})
}

func jsonNum(n uint64) string { b, _ := json.Marshal(n); return string(b) }

type procs struct {
	t             *testing.T
	bin, eps, dir string
}

// script makes a shell script run in the test's directory.
func (p *procs) script(s string) string { return "cd '" + p.dir + "' && " + s }

func (p *procs) touch(name string) {
	if err := os.WriteFile(filepath.Join(p.dir, name), nil, 0o644); err != nil {
		p.t.Fatal(err)
	}
}

func (p *procs) exists(name string) bool {
	_, err := os.Stat(filepath.Join(p.dir, name))
	return err == nil
}

func (p *procs) read(name string) string {
	b, err := os.ReadFile(filepath.Join(p.dir, name))
	if err != nil {
		p.t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

// awaitFile waits until a command created name (the command is the event's
// only source: there is nothing else to wait on).
func (p *procs) awaitFile(name string) {
	p.t.Helper()
	for deadline := time.Now().Add(time.Minute); !p.exists(name); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			p.t.Fatalf("%s never appeared", name)
		}
	}
}

// awaitWaiters waits until `lockgate lock inspect` reports n waiters on key.
func (p *procs) awaitWaiters(key string, n int) {
	p.t.Helper()
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(20 * time.Millisecond) {
		out, err := exec.Command(p.bin, "lock", "inspect", key, "--endpoints", p.eps).Output()
		var info struct {
			Waiters int `json:"waiters"`
		}
		if err == nil && json.Unmarshal(out, &info) == nil && info.Waiters >= n {
			return
		}
		if time.Now().After(deadline) {
			p.t.Fatalf("%s never had %d waiters (last: %s, %v)", key, n, out, err)
		}
	}
}

type proc struct {
	t      *testing.T
	cmd    *exec.Cmd
	errBuf *syncBuffer
	lines  chan string
	done   chan struct{}
}

// start runs `lockgate ARGS --endpoints …` in its own process group.
func (p *procs) start(args ...string) *proc {
	p.t.Helper()
	i := len(args)
	for j, a := range args {
		if a == "--" {
			i = j
			break
		}
	}
	full := append(append(append([]string{}, args[:i]...), "--endpoints", p.eps), args[i:]...)
	cmd := exec.Command(p.bin, full...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, err := cmd.StdoutPipe()
	if err != nil {
		p.t.Fatal(err)
	}
	pr := &proc{t: p.t, cmd: cmd, errBuf: &syncBuffer{}, lines: make(chan string, 64), done: make(chan struct{})}
	cmd.Stderr = pr.errBuf
	if err := cmd.Start(); err != nil {
		p.t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			pr.lines <- sc.Text()
		}
		close(pr.lines)
	}()
	go func() { cmd.Wait(); close(pr.done) }()
	p.t.Cleanup(func() { syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); <-pr.done })
	return pr
}

// wait waits for the process to exit and checks its status (want -1: any).
func (pr *proc) wait(want int) int {
	pr.t.Helper()
	select {
	case <-pr.done:
	case <-time.After(2 * time.Minute):
		pr.t.Fatalf("%v did not exit; stderr:\n%s", pr.cmd.Args, pr.stderr())
	}
	code := pr.cmd.ProcessState.ExitCode()
	if want >= 0 && code != want {
		pr.t.Fatalf("%v: exit %d, want %d; stderr:\n%s", pr.cmd.Args, code, want, pr.stderr())
	}
	return code
}

// kill SIGKILLs the process and its command: a crash, no resignation.
func (pr *proc) kill() {
	syscall.Kill(-pr.cmd.Process.Pid, syscall.SIGKILL)
	<-pr.done
}

func (pr *proc) signal(s syscall.Signal) { pr.cmd.Process.Signal(s) }

func (pr *proc) stderr() string { return pr.errBuf.String() }

// line reads the next JSON line of `observe --json`.
func (pr *proc) line() leaderJSON {
	pr.t.Helper()
	select {
	case s, ok := <-pr.lines:
		if !ok {
			pr.t.Fatalf("%v ended; stderr:\n%s", pr.cmd.Args, pr.stderr())
		}
		var l leaderJSON
		if err := json.Unmarshal([]byte(s), &l); err != nil {
			pr.t.Fatalf("observe printed %q: %v", s, err)
		}
		return l
	case <-time.After(time.Minute):
		pr.t.Fatalf("%v printed nothing for a minute; stderr:\n%s", pr.cmd.Args, pr.stderr())
	}
	return leaderJSON{}
}
