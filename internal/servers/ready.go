package servers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

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

// startStopped starts the processes of members that are not running
// and, if it started any, waits (waitAll, readyTimeout) until the check of
// every member passes, those already running included: a cluster member
// is ready only with its peers. part gives a member's process and check.
func startStopped[M any](ctx context.Context, members []M, part func(M) (*proc, func() error)) error {
	procs := make([]*proc, len(members))
	checks := make([]func() error, len(members))
	started := false
	for i, m := range members {
		procs[i], checks[i] = part(m)
		if procs[i].pid() == 0 {
			if err := procs[i].start(); err != nil {
				return err
			}
			started = true
		}
	}
	if !started {
		return nil
	}
	return waitAll(ctx, time.Now().Add(readyTimeout), procs, checks)
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
