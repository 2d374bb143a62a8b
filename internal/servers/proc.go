package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
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

// kill SIGKILLs the process and all its descendants and waits until it is
// reaped and its output drained. Killing a process that is not running
// only waits for a finished run's output to be drained.
func (p *proc) kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.current()
	if r == nil {
		p.waitDoneLocked()
		return
	}
	desc := r.killTree()
	<-r.done
	waitDead(desc)
	p.paused = false
}

// waitDoneLocked waits for the last run's pump/reaper to finish. A run whose
// process exited on its own may still be draining when stop or kill is
// called; callers rely on no output being logged after they return.
func (p *proc) waitDoneLocked() {
	if p.run != nil {
		<-p.run.done
	}
}

// pause stops the process and all its descendants with SIGSTOP. It fails
// with ErrNotRunning when there is no process to stop.
func (p *proc) pause() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.current()
	if r == nil {
		return fmt.Errorf("%s: Pause: %w", p.name, ErrNotRunning)
	}
	r.sigMu.Lock()
	defer r.sigMu.Unlock()
	if r.exited {
		return fmt.Errorf("%s: Pause: process has exited: %w", p.name, ErrNotRunning)
	}
	desc := r.freezeLocked()
	if len(desc) > 0 {
		if err := r.startGuardLocked(append([]int{r.pid}, desc...)); err != nil {
			logf(p.log, "%s: Pause: %v (stopped workers would survive a crash of this process)", p.name, err)
		}
	}
	p.paused = true
	return nil
}

// startGuardLocked starts a watchdog for a paused process tree. The leader
// dies with our process (Pdeathsig), but workers that left its session
// (postgres backends) do not get the kernel's orphaned-group SIGCONT, so
// they would stay stopped forever. The watchdog blocks reading a pipe whose
// only write end is ours; when our process dies the pipe closes and the
// watchdog SIGCONTs the workers, which then notice that their parent died
// and exit. Caller holds r.sigMu.
func (r *run) startGuardLocked(pids []int) error {
	if r.guard != nil {
		return nil
	}
	pr, pw, err := os.Pipe() // close-on-exec: no other child inherits pw
	if err != nil {
		return fmt.Errorf("watchdog pipe: %w", err)
	}
	args := []string{"-c", `read x; kill -CONT "$@" 2>/dev/null; exit 0`, "servers-guard"}
	for _, pid := range pids {
		args = append(args, strconv.Itoa(pid))
	}
	cmd := exec.Command("/bin/sh", args...)
	cmd.Stdin = pr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	err = cmd.Start()
	pr.Close()
	if err != nil {
		pw.Close()
		return fmt.Errorf("watchdog: %w", err)
	}
	r.guard, r.guardW = cmd, pw
	return nil
}

// stopGuardLocked ends the watchdog, if any. Caller holds r.sigMu.
func (r *run) stopGuardLocked() {
	if r.guard == nil {
		return
	}
	_ = r.guard.Process.Kill()
	_ = r.guard.Wait()
	r.guardW.Close()
	r.guard, r.guardW = nil, nil
}

// resume continues the process and all its descendants with SIGCONT. It
// fails with ErrNotRunning when there is no process to continue.
func (p *proc) resume() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := p.current()
	if r == nil {
		return fmt.Errorf("%s: Resume: %w", p.name, ErrNotRunning)
	}
	r.thaw()
	p.paused = false
	return nil
}

// unpause resumes the process if it was paused with pause; otherwise it
// does nothing.
func (p *proc) unpause() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if r := p.current(); r != nil && p.paused {
		r.thaw()
	}
	p.paused = false
}

// freezeLocked SIGSTOPs the process group, then every descendant of the
// leader (postgres backends leave the group with setsid, so the group alone
// is not enough), parents before children, and returns the descendants.
// Because each parent is stopped before its children are listed, no new
// child appears and no listed child is reaped (its PID cannot be reused)
// while we signal. Caller holds r.sigMu with !r.exited.
func (r *run) freezeLocked() []int {
	_ = syscall.Kill(-r.pid, syscall.SIGSTOP)
	waitSettled(r.pid)
	stopped := map[int]bool{r.pid: true}
	var desc []int
	for round := 0; round < 16; round++ {
		kids := childrenOf(stopped)
		if len(kids) == 0 {
			break
		}
		for _, k := range kids {
			_ = syscall.Kill(k, syscall.SIGSTOP)
			stopped[k] = true
			desc = append(desc, k)
		}
		for _, k := range kids {
			waitSettled(k)
		}
	}
	return desc
}

// killTree SIGKILLs the process, its group and all its descendants, and
// returns the descendants (which are not our children, so the caller
// cannot reap them; see waitDead).
func (r *run) killTree() []int {
	r.sigMu.Lock()
	defer r.sigMu.Unlock()
	if r.exited {
		return nil
	}
	desc := r.freezeLocked()
	for _, k := range desc {
		_ = syscall.Kill(k, syscall.SIGKILL)
	}
	_ = syscall.Kill(-r.pid, syscall.SIGKILL)
	r.stopGuardLocked()
	return desc
}

// waitDead polls until every pid is gone or a zombie (a dead process that
// has released its memory, including shared memory, but is not reaped
// yet), for at most 10 seconds. SIGKILL takes effect asynchronously; a
// restarted postgres must not find the killed backends still attached to
// the old shared memory.
func waitDead(pids []int) {
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range pids {
		for time.Now().Before(deadline) {
			st, ok := procStat(pid)
			if !ok || st.state == 'Z' || st.state == 'X' {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}
}

// thaw SIGCONTs the descendants, then the process group.
func (r *run) thaw() {
	r.sigMu.Lock()
	defer r.sigMu.Unlock()
	if r.exited {
		return
	}
	for _, k := range descendants(r.pid) {
		_ = syscall.Kill(k, syscall.SIGCONT)
	}
	_ = syscall.Kill(-r.pid, syscall.SIGCONT)
	r.stopGuardLocked()
}

// errStart reports that a server did not come up: it exited early, or the
// port it was given answered but belongs to another process.
type errStart struct {
	name, what, tail string
	// addrInUse: the port was taken; retrying with other ports may help.
	addrInUse bool
}

func (e *errStart) Error() string {
	return fmt.Sprintf("%s %s; last output:\n%s", e.name, e.what, e.tail)
}

// waitReady polls check every pollInterval until it succeeds, the process
// exits (an *errStart) or the deadline passes.
func (p *proc) waitReady(deadline time.Time, check func() error) error {
	return waitAll(context.Background(), deadline, []*proc{p}, []func() error{check})
}

// waitAll polls checks[i] for procs[i] until every check has succeeded
// once, then verifies that each process itself listens on its ports (a
// server of a parallel test or run that grabbed a port would answer the probe
// too). It fails as soon as any of the processes exits (an *errStart), or
// when the deadline passes or ctx ends.
func waitAll(ctx context.Context, deadline time.Time, procs []*proc, checks []func() error) error {
	ready := make([]bool, len(procs))
	last := make([]error, len(procs))
	for {
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("servers: waiting for %s: %w", procs[0].name, err)
		}
		pending := 0
		for i := range procs {
			if !ready[i] {
				if last[i] = checks[i](); last[i] == nil {
					ready[i] = true
				} else {
					pending++
				}
			}
		}
		for _, p := range procs {
			select {
			case <-p.doneChan():
				// Exiting during startup is fatal even for a member that
				// already answered: the others may depend on it.
				return &errStart{
					name:      p.name,
					what:      "exited before becoming ready (" + p.exitStatus() + ")",
					tail:      p.logTail(),
					addrInUse: p.tailContains("address already in use"),
				}
			default:
			}
		}
		if pending == 0 {
			for _, p := range procs {
				if port, ok := p.foreignPort(); !ok {
					return &errStart{
						name:      p.name,
						what:      fmt.Sprintf("answered on port %d, but that port is held by another process", port),
						tail:      p.logTail(),
						addrInUse: true,
					}
				}
			}
			return nil
		}
		if time.Now().After(deadline) {
			var b strings.Builder
			for i, p := range procs {
				if !ready[i] {
					fmt.Fprintf(&b, "%s not ready after %v (last probe error: %v); last output:\n%s\n",
						p.name, readyTimeout, last[i], p.logTail())
				}
			}
			return errors.New(strings.TrimSuffix(b.String(), "\n"))
		}
		select {
		case <-ctx.Done():
		case <-time.After(pollInterval):
		}
	}
}

// foreignPort checks that the running process listens on each of p.ports;
// it returns the first port it does not hold and false, or (0, true).
func (p *proc) foreignPort() (int, bool) {
	pid := p.pid()
	if pid == 0 {
		return 0, true // exited: reported by the caller's next check
	}
	for _, port := range p.ports {
		if owned, known := listensOn(pid, port); known && !owned {
			return port, false
		}
	}
	return 0, true
}

// portPicker returns n distinct free ports; freePorts in production, a
// fake in tests of the retry path.
type portPicker func(n int) ([]int, error)

// retryPorts calls try with n ports from pick until it succeeds, fails for
// another reason than a port being taken (see isAddrInUse), or
// startAttempts attempts have failed. try must leave no process running
// when it fails.
func retryPorts(n int, pick portPicker, try func(ports []int, attempt int) error) error {
	for attempt := 1; ; attempt++ {
		ports, err := pick(n)
		if err != nil {
			return err
		}
		err = try(ports, attempt)
		if err == nil || !isAddrInUse(err) || attempt == startAttempts {
			return err
		}
	}
}

// isAddrInUse reports whether err says the server could not bind its port.
func isAddrInUse(err error) bool {
	var e *errStart
	return errors.As(err, &e) && e.addrInUse
}
