package servers

import (
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"syscall"
	"time"
)

// Signals to a server's whole process tree: kill, pause and resume.

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
