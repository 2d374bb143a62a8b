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
// several times, on every request — measured at 10–15 µs a call here. A
// worker that has served one call keeps its grown stack for the next.
const (
	// maxIdleWorkers bounds the workers parked waiting for a call; more
	// concurrent calls than that run on goroutines that end afterwards.
	maxIdleWorkers = 64
	// workerIdle is how long a worker waits for a call before it ends.
	workerIdle = 2 * time.Second
)

type workers struct {
	calls chan func() // unbuffered: a send succeeds only when a worker waits

	mu     sync.Mutex
	idle   int
	closed bool
	stop   chan struct{} // closed by close: idle workers end
}

func newWorkers() *workers {
	return &workers{calls: make(chan func()), stop: make(chan struct{})}
}

// run calls f on an idle worker, or on a new one when none waits.
func (w *workers) run(f func()) {
	select {
	case w.calls <- f:
	default:
		go w.work(f)
	}
}

// work runs f, then waits for more calls while the idle workers are fewer
// than maxIdleWorkers, until workerIdle passes without one or the gateway
// closes.
func (w *workers) work(f func()) {
	var t *time.Timer
	for {
		f()
		f = nil // let what f holds be collected while we wait
		w.mu.Lock()
		if w.closed || w.idle >= maxIdleWorkers {
			w.mu.Unlock()
			return
		}
		w.idle++
		w.mu.Unlock()
		if t == nil {
			t = time.NewTimer(workerIdle)
		} else {
			t.Reset(workerIdle)
		}
		select {
		case f = <-w.calls:
		case <-t.C:
		case <-w.stop:
		}
		w.mu.Lock()
		w.idle--
		w.mu.Unlock()
		if f == nil {
			return
		}
		t.Stop()
	}
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
