// Package workerpool runs short calls on reused goroutines: the gateway's
// backend calls, and redlock's requests to its nodes.
//
// A call through a driver (pgx, go-redis, the etcd client) needs a stack of
// tens of KiB, which a fresh goroutine reaches by growing and copying its
// stack several times, on every call. A worker that has served one call
// keeps its grown stack for the next.
//
// # Idle policy
//
// At most MaxIdle workers wait for calls; a worker that finishes a call
// while that many wait ends. A sweep, armed once per SweepInterval while
// any worker is idle, retires as many workers as stayed idle through the
// whole interval, so a worker idle for between one and two intervals ends.
//
// Idle workers carry no timer of their own. A timer per worker, reset after
// every call, would arm a timer on every call, and a timer that becomes the
// process's earliest wakes the network poller (or another thread) to re-arm
// it: work on every call to save the cost of a rare one. The sweep costs one
// timer per interval, whatever the call rate. The bound on idle workers
// keeps a burst from leaving thousands of parked goroutines (and their
// stacks) behind until the sweep.
package workerpool

import (
	"sync"
	"time"
)

const (
	// MaxIdle bounds the workers parked waiting for a call; more
	// concurrent calls than that run on goroutines that end afterwards.
	MaxIdle = 64
	// SweepInterval is the time between sweeps: a worker idle for between
	// one and two of them ends.
	SweepInterval = time.Second
)

// Pool is a set of reusable worker goroutines. Its methods are safe for
// concurrent use. The zero value is not usable; call New.
type Pool struct {
	interval time.Duration // between sweeps: SweepInterval

	// calls hands a call to an idle worker; nil tells it to end. It is
	// unbuffered: a send succeeds only when a worker waits.
	calls chan func()

	mu       sync.Mutex
	idle     int  // workers waiting on calls
	minIdle  int  // the fewest idle workers since the last sweep
	sweeping bool // a sweep is scheduled
	closed   bool
	stop     chan struct{} // closed by Close: idle workers end
}

// New returns an empty pool.
func New() *Pool {
	return &Pool{interval: SweepInterval, calls: make(chan func()), stop: make(chan struct{})}
}

// Go calls f on an idle worker, or on a new goroutine when none waits. It
// never blocks, and f always runs, also after Close: a call may therefore
// wait for another call started by Go without deadlocking the pool.
func (p *Pool) Go(f func()) {
	select {
	case p.calls <- f:
	default:
		go p.work(f)
	}
}

// work runs f, then the calls handed to it while it is one of at most
// MaxIdle idle workers, until a sweep retires it or the pool closes.
func (p *Pool) work(f func()) {
	for {
		f()
		f = nil // let what f holds be collected while we wait
		p.mu.Lock()
		if p.closed || p.idle >= MaxIdle {
			p.mu.Unlock()
			return
		}
		p.idle++
		if !p.sweeping {
			p.sweeping = true
			p.minIdle = p.idle
			time.AfterFunc(p.interval, p.sweep)
		}
		p.mu.Unlock()
		select {
		case f = <-p.calls:
		case <-p.stop:
		}
		p.mu.Lock()
		p.idle--
		p.minIdle = min(p.minIdle, p.idle)
		p.mu.Unlock()
		if f == nil {
			return
		}
	}
}

// sweep retires the workers that were idle through the last interval, and
// schedules the next sweep while some are idle.
func (p *Pool) sweep() {
	p.mu.Lock()
	retire := p.minIdle
	p.minIdle = p.idle - retire
	p.mu.Unlock()
	// Each retired worker takes a nil. The send waits for one to take it,
	// because a non-blocking send can miss: a worker counted idle may not
	// have reached its receive yet, or may have taken a call since, in
	// which case the next one to park ends instead. Close ends the wait.
	for range retire {
		select {
		case p.calls <- nil:
		case <-p.stop:
			return
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.idle > 0 && !p.closed {
		time.AfterFunc(p.interval, p.sweep)
		return
	}
	p.sweeping = false
}

// Close ends the idle workers; busy ones end when their call returns. Go
// still runs calls afterwards, each on a goroutine of its own.
func (p *Pool) Close() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.closed {
		p.closed = true
		close(p.stop)
	}
}
