package gateway

import (
	"sync"
	"time"
)

// Backend calls (acquire, release, renew, inspect) run off the connection's
// reader, so that one slow call does not hold up the next frame. They run
// on reused goroutines rather than one new goroutine each: a call through a
// backend's driver (pgx, go-redis, the etcd client) needs a stack of tens of
// KiB, which a fresh goroutine reaches by growing and copying its stack
// several times, on every request. A worker that has served one call keeps
// its grown stack for the next.
//
// Idle workers carry no timer of their own: arming one per call would add
// the earliest timer of the process at every call, and a new earliest timer
// wakes the network poller (or another thread) to re-arm it. A sweep, armed
// once per workerIdle while workers are idle, retires as many workers as
// stayed idle through the whole interval.
const (
	// maxIdleWorkers bounds the workers parked waiting for a call; more
	// concurrent calls than that run on goroutines that end afterwards.
	maxIdleWorkers = 64
	// workerIdle is the sweep interval: a worker idle for between one and
	// two of them ends.
	workerIdle = time.Second
)

type workers struct {
	interval time.Duration // between sweeps: workerIdle

	// calls hands a call to an idle worker; nil tells it to end. It is
	// unbuffered: a send succeeds only when a worker waits.
	calls chan func()

	mu       sync.Mutex
	idle     int  // workers waiting on calls
	minIdle  int  // the fewest idle workers since the last sweep
	sweeping bool // a sweep is scheduled
	closed   bool
	stop     chan struct{} // closed by close: idle workers end
}

func newWorkers() *workers {
	return &workers{interval: workerIdle, calls: make(chan func()), stop: make(chan struct{})}
}

// run calls f on an idle worker, or on a new one when none waits.
func (w *workers) run(f func()) {
	select {
	case w.calls <- f:
	default:
		go w.work(f)
	}
}

// work runs f, then the calls handed to it while it is one of at most
// maxIdleWorkers idle workers, until a sweep retires it or the gateway
// closes.
func (w *workers) work(f func()) {
	for {
		f()
		f = nil // let what f holds be collected while we wait
		w.mu.Lock()
		if w.closed || w.idle >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle++
		if !w.sweeping {
			w.sweeping = true
			w.minIdle = w.idle
			time.AfterFunc(w.interval, w.sweep)
		}
		w.mu.Unlock()
		select {
		case f = <-w.calls:
		case <-w.stop:
		}
		w.mu.Lock()
		w.idle--
		w.minIdle = min(w.minIdle, w.idle)
		w.mu.Unlock()
		if f == nil {
			return
		}
	}
}

// sweep retires the workers that were idle through the last interval, and
// schedules the next sweep while some are idle.
func (w *workers) sweep() {
	w.mu.Lock()
	retire := w.minIdle
	w.minIdle = w.idle - retire
	w.mu.Unlock()
	// Each retired worker takes a nil. The send waits for one to take it:
	// a worker counted idle may not have reached its receive yet (a
	// non-blocking send then missed it, and a stress run saw a worker
	// outlive its sweep), or may have taken a call since, in which case
	// the next one to park ends instead. Close ends the wait.
	for range retire {
		select {
		case w.calls <- nil:
		case <-w.stop:
			return
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.idle > 0 && !w.closed {
		time.AfterFunc(w.interval, w.sweep)
		return
	}
	w.sweeping = false
}

// close ends the idle workers; busy ones end when their call returns.
func (w *workers) close() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		w.closed = true
		close(w.stop)
	}
}
