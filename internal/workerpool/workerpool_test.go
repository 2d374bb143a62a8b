package workerpool

import (
	"runtime"
	"sync"
	"testing"
	"time"
)

// idleWorkers waits (yielding, without sleeping) until n workers are idle.
func idleWorkers(t *testing.T, p *Pool, n int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		p.mu.Lock()
		idle := p.idle
		p.mu.Unlock()
		if idle == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d idle workers, want %d", idle, n)
		}
		runtime.Gosched()
	}
}

// runConcurrently runs n calls on p that all wait until every one of them
// has started (so none can run on a worker another one occupies), and
// returns once all have returned.
func runConcurrently(p *Pool, n int) {
	var started, done sync.WaitGroup
	release := make(chan struct{})
	started.Add(n)
	done.Add(n)
	for range n {
		p.Go(func() {
			started.Done()
			<-release
			done.Done()
		})
	}
	started.Wait()
	close(release)
	done.Wait()
}

// TestPool: calls run concurrently (a call that waits for another does
// not deadlock on a busy worker), finished workers wait for more calls, a
// sweep retires those idle through a whole interval, and Close ends the
// rest.
func TestPool(t *testing.T) {
	p := New()
	p.interval = time.Hour // the test sweeps by hand
	const n = 20
	runConcurrently(p, n)
	idleWorkers(t, p, n)

	// A call on an idle worker.
	ran := make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	idleWorkers(t, p, n)

	// The first sweep retires the one worker idle since the sweep was
	// armed, the second the others.
	p.sweep()
	idleWorkers(t, p, n-1)
	p.sweep()
	idleWorkers(t, p, 0)

	// Close ends idle workers; calls still run afterwards.
	p.Go(func() {})
	idleWorkers(t, p, 1)
	p.Close()
	idleWorkers(t, p, 0)
	ran = make(chan struct{})
	p.Go(func() { close(ran) })
	<-ran
	idleWorkers(t, p, 0)
	p.Close() // a second Close is harmless
}

// TestPoolMaxIdle: after more concurrent calls than MaxIdle, only MaxIdle
// workers stay parked.
func TestPoolMaxIdle(t *testing.T) {
	p := New()
	p.interval = time.Hour
	defer p.Close()
	runConcurrently(p, MaxIdle+10)
	idleWorkers(t, p, MaxIdle)
}

// TestPoolSweepTimer: the armed sweep itself (not a call by hand) retires
// idle workers, and a later call re-arms it.
func TestPoolSweepTimer(t *testing.T) {
	p := New()
	p.interval = time.Millisecond
	defer p.Close()
	for range 2 {
		runConcurrently(p, 3)
		idleWorkers(t, p, 0)
	}
}

// TestPoolNestedCalls: a call that waits for calls it started itself
// completes even when every worker is busy.
func TestPoolNestedCalls(t *testing.T) {
	p := New()
	defer p.Close()
	var wg sync.WaitGroup
	for range 2 * MaxIdle {
		wg.Add(1)
		p.Go(func() {
			defer wg.Done()
			inner := make(chan struct{})
			p.Go(func() { close(inner) })
			<-inner
		})
	}
	wg.Wait()
}
