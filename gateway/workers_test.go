package gateway

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// idleWorkers waits (yielding, without sleeping) until n workers are idle.
func idleWorkers(t *testing.T, w *workers, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		w.mu.Lock()
		idle := w.idle
		w.mu.Unlock()
		if idle == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers, want %d", idle, n)
		}
		runtime.Gosched()
	}
}

// TestWorkers: calls run concurrently (a call that waits for another does
// not deadlock on a busy worker), finished workers wait for more calls, a
// sweep retires those idle through a whole interval, and close ends the
// rest.
func TestWorkers(t *testing.T) {
	w := newWorkers()
	w.interval = time.Hour // the test sweeps by hand
	const n = 20
	var started, done sync.WaitGroup
	release := make(chan struct{})
	started.Add(n)
	done.Add(n)
	for range n {
		w.run(func() {
			started.Done()
			<-release // every call waits until all have started
			done.Done()
		})
	}
	started.Wait()
	close(release)
	done.Wait()
	idleWorkers(t, w, n)

	// A call on an idle worker.
	ran := make(chan struct{})
	w.run(func() { close(ran) })
	<-ran
	idleWorkers(t, w, n)

	// The first sweep retires the one worker idle since the sweep was
	// armed, the second the others.
	w.sweep()
	idleWorkers(t, w, n-1)
	w.sweep()
	idleWorkers(t, w, 0)

	// close ends idle workers; calls still run afterwards.
	w.run(func() {})
	idleWorkers(t, w, 1)
	w.close()
	idleWorkers(t, w, 0)
	ran = make(chan struct{})
	w.run(func() { close(ran) })
	<-ran
}
