package servers

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// readyTimeout bounds how long a server may take to become ready.
	readyTimeout = 30 * time.Second
	// pollInterval is the pause between two readiness probes.
	pollInterval = 25 * time.Millisecond
	// stopTimeout is how long Stop waits after the polite signal before
	// it resorts to SIGKILL.
	stopTimeout = 10 * time.Second
	// tailLines is how many of the last output lines are kept for error
	// messages.
	tailLines = 40
	// startAttempts is how often a server start is retried with fresh
	// ports when the chosen port turned out to be taken.
	startAttempts = 5
)

// proc is one server process owned by its starter: it starts the command
// in its own process group, pumps its combined stdout/stderr to its Logger
// line by line, and offers the fault-injection primitives used by Redis,
// Postgres, EtcdMember and RaftNode. The zero value is not usable; fill the configuration fields
// and call start.
//
// SIGSTOP, SIGCONT and SIGKILL go to the whole process group and to every
// descendant (postgres backends call setsid and so leave the group), so
// that servers that fork workers are paused or killed as a whole; the
// polite stop signal goes to the leader only.
type proc struct {
	log  Logger // receives the output, one line per call
	name string // log prefix, e.g. "redis[127.0.0.1:6400]"
	path string
	args []string
	dir  string
	cred *syscall.Credential // run as this user (nil: as ourselves)
	env  []string            // environment; nil means os.Environ()
	// ports the server must listen on (on 127.0.0.1) once ready.
	ports []int
	// stopSig is sent to the group leader by stop; SIGTERM if zero.
	stopSig syscall.Signal

	mu     sync.Mutex // serialises start/stop/kill/pause/resume
	run    *run       // current or last run; nil before the first start
	paused bool

	tailMu sync.Mutex
	tail   []string // last tailLines output lines of the current/last run
}

// run is one execution of the command.
type run struct {
	cmd  *exec.Cmd
	pid  int
	done chan struct{} // closed once the process is reaped and its output drained
	err  error         // result of cmd.Wait, valid after done is closed

	// sigMu orders signals against reaping: the reaper sets exited under
	// it after the process has exited but before reaping it, so a signal
	// sent under sigMu while !exited can only reach our process (the
	// unreaped zombie keeps its PID and process group reserved).
	sigMu  sync.Mutex
	exited bool
	// guard, while paused with descendants, is a watchdog that SIGCONTs
	// them if our process dies (see startGuardLocked); guarded by
	// sigMu.
	guard  *exec.Cmd
	guardW *os.File
}

// finished reports whether the run is over (without blocking).
func (r *run) finished() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// start launches the command. It must not be called while a previous run
// is still alive.
func (p *proc) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run != nil && !p.run.finished() {
		return fmt.Errorf("%s: already running (pid %d)", p.name, p.run.pid)
	}

	pr, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("%s: pipe: %w", p.name, err)
	}
	cmd := exec.Command(p.path, p.args...)
	cmd.Dir = p.dir
	cmd.Env = p.env
	cmd.Stdin = nil
	cmd.Stdout = pw
	cmd.Stderr = pw
	cmd.SysProcAttr = &syscall.SysProcAttr{
		// Own process group, so that signals reach forked workers that
		// stay in it, and a terminal's Ctrl-C does not reach the server
		// directly.
		Setpgid: true,
		// Kill the server if our process dies without cleanup. The
		// kernel sends this when the forking OS thread exits; Go only
		// exits the thread of a goroutine that ends while locked with
		// runtime.LockOSThread, so do not start servers from such a
		// goroutine.
		Pdeathsig:  syscall.SIGKILL,
		Credential: p.cred,
	}
	if err := cmd.Start(); err != nil {
		pr.Close()
		pw.Close()
		return fmt.Errorf("%s: start %s: %w", p.name, p.path, err)
	}
	pw.Close() // the child holds its own copy

	p.tailMu.Lock()
	p.tail = nil // error messages are about this run
	p.tailMu.Unlock()

	r := &run{cmd: cmd, pid: cmd.Process.Pid, done: make(chan struct{})}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		p.pump(pr)
	}()
	go func() {
		// Wait for the exit without reaping, so that the group can still
		// be signalled safely: anything left in it (workers that outlived
		// the leader) is killed so it releases the output pipe.
		var info unix.Siginfo
		for {
			err := unix.Waitid(unix.P_PID, r.pid, &info, unix.WEXITED|unix.WNOWAIT, nil)
			if err != unix.EINTR {
				break
			}
		}
		r.sigMu.Lock()
		r.exited = true
		_ = syscall.Kill(-r.pid, syscall.SIGKILL)
		r.stopGuardLocked()
		r.sigMu.Unlock()
		r.err = cmd.Wait()
		// Workers that left the process group (postgres backends call
		// setsid) and outlived the leader may hold the pipe a little
		// longer; they exit on their own when they notice, but do not
		// let them hold up the caller.
		select {
		case <-drained:
		case <-time.After(5 * time.Second):
			logf(p.log, "%s: output still open 5s after exit; closing it", p.name)
			pr.Close()
			<-drained
		}
		pr.Close()
		close(r.done)
	}()
	p.run = r
	p.paused = false
	return nil
}

// pump copies the process output to the Logger, one line at a time, and keeps
// the last lines for error messages. It returns at EOF (or when the read
// end is closed).
func (p *proc) pump(r io.Reader) {
	br := bufio.NewReaderSize(r, 64*1024)
	for {
		line, err := br.ReadString('\n')
		line = strings.TrimRight(line, "\r\n")
		if line != "" {
			p.tailMu.Lock()
			p.tail = append(p.tail, line)
			if len(p.tail) > tailLines {
				p.tail = p.tail[len(p.tail)-tailLines:]
			}
			p.tailMu.Unlock()
			logf(p.log, "%s: %s", p.name, line)
		}
		if err != nil {
			return
		}
	}
}

// logTail returns the last output lines, indented for error messages.
func (p *proc) logTail() string {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	if len(p.tail) == 0 {
		return "\t(no output)"
	}
	return "\t" + strings.Join(p.tail, "\n\t")
}

// tailContains reports whether the recent output contains s
// (case-insensitively).
func (p *proc) tailContains(s string) bool {
	p.tailMu.Lock()
	defer p.tailMu.Unlock()
	s = strings.ToLower(s)
	for _, l := range p.tail {
		if strings.Contains(strings.ToLower(l), s) {
			return true
		}
	}
	return false
}

// current returns the live run, or nil. Caller holds p.mu.
func (p *proc) current() *run {
	if p.run == nil || p.run.finished() {
		return nil
	}
	return p.run
}

// pid returns the PID of the running process, or 0 if none is running.
func (p *proc) pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.current(); r != nil {
		return r.pid
	}
	return 0
}

// doneChan returns the done channel of the current or last run (nil if
// never started).
func (p *proc) doneChan() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil {
		return nil
	}
	return p.run.done
}

// exitStatus describes how the last run ended.
func (p *proc) exitStatus() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.run == nil || !p.run.finished() {
		return "still running"
	}
	if p.run.err == nil {
		return "exit status 0"
	}
	return p.run.err.Error()
}

// stop resumes the process if paused, sends the polite stop signal to the
// leader, waits up to stopTimeout, then kills the whole tree. It returns
// once the process is reaped and its output drained. Stopping a process
// that is not running only waits for the output of a run that ended on its
// own to be drained.
func (p *proc) stop() {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.current()
	if r == nil {
		p.waitDoneLocked()
		return
	}
	if p.paused {
		r.thaw()
		p.paused = false
	}
	sig := p.stopSig
	if sig == 0 {
		sig = syscall.SIGTERM
	}
	r.sigMu.Lock()
	if !r.exited {
		_ = syscall.Kill(r.pid, sig)
	}
	r.sigMu.Unlock()
	select {
	case <-r.done:
		return
	case <-time.After(stopTimeout):
		logf(p.log, "%s: did not exit on %v within %v; killing it", p.name, sig, stopTimeout)
	}
	desc := r.killTree()
	<-r.done
	waitDead(desc)
}

// restart stops the process if it runs, starts it again and waits until
// check succeeds; the error names what when it does not.
func (p *proc) restart(what string, check func() error) error {
	p.stop()
	if err := p.start(); err != nil {
		return fmt.Errorf("servers: %s: %w", what, err)
	}
	if err := p.waitReady(time.Now().Add(readyTimeout), check); err != nil {
		p.stop()
		return fmt.Errorf("servers: %s: %w", what, err)
	}
	return nil
}
