package linearize

import (
	"fmt"
	"runtime"
	"runtime/metrics"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anishathalye/porcupine"
	"github.com/lockgate/lockgate/check"
)

// KeyVerdict is porcupine's verdict on one key's acquire/release history.
type KeyVerdict struct {
	Key string
	// Result is Ok, Illegal, or Unknown: the key was not checked
	// (NotChecked says why).
	Result porcupine.CheckResult
	// NotChecked is empty for a decided key (Ok or Illegal); else why its
	// search was given up, beginning with the budget it ran out of:
	// "time: …" (Options.LinearizabilityKeyTimeout, or what was left of
	// Options.LinearizabilityTimeout) or "memory: …"
	// (Options.LinearizabilityMemory).
	NotChecked string
	// Ops is how many operations of the key the model saw.
	Ops int
	// Elapsed is how long its search took.
	Elapsed time.Duration
}

// LinearizabilityByKey checks each key's acquire/release history on its
// own: the keys are independent in the model, so the history is
// linearizable iff every key's is. Up to GOMAXPROCS keys are searched at
// once, each bounded by Options.LinearizabilityKeyTimeout, all together by
// Options.LinearizabilityTimeout, and the heap by
// Options.LinearizabilityMemory: a key whose search runs out of one of them
// is not checked (Unknown, with the reason in NotChecked) rather than
// holding up the others or taking the process down. The verdicts are in
// key order.
//
// The memory bound. porcupine's search keeps every (linearized set, state)
// it has seen, and a search that explodes grows its heap by gigabytes a
// minute (one key of a 10-minute campaign reached 24 GB and was killed by
// the kernel); porcupine can be stopped only by its timeout. So a watchdog
// reads the process's live heap (runtime/metrics) every 50 ms, and when it
// exceeds the budget it gives up the running search that has taken the
// most steps (the best guess at the one whose cache grew): from then on
// that search's model refuses every step, which porcupine takes for a dead
// end everywhere, so it unwinds its stack without adding to its cache and
// returns within milliseconds, and its cache is garbage. The key is then
// reported not checked for memory, whatever porcupine answered. The heap
// is the whole process's (the history itself counts), the budget is
// checked between samples only (50 ms of growth, tens of megabytes, can
// pass it), and when keys run in parallel the one given up is not always
// the culprit: it is an honest bound on the process, not a measure of any
// one key. Running each key in a child process with an address-space limit
// would pin the blame exactly, at the cost of serialising each key's
// history to it: not worth it while the keys' searches take milliseconds.
func LinearizabilityByKey(h check.History, opts check.Options) []KeyVerdict {
	opts = opts.WithDefaults()
	parts := partitionByKey(Operations(h, opts.ExpirySlack))
	out := make([]KeyVerdict, len(parts))
	var deadline time.Time
	if opts.LinearizabilityTimeout > 0 {
		deadline = time.Now().Add(opts.LinearizabilityTimeout)
	}
	wd := newWatchdog(opts.LinearizabilityMemory)
	defer wd.stop()
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(runtime.GOMAXPROCS(0), len(parts)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				out[i] = checkKey(parts[i], opts.LinearizabilityKeyTimeout, deadline, wd)
			}
		}()
	}
	for i := range parts {
		next <- i
	}
	close(next)
	wg.Wait()
	return out
}

// search is one key's running search, as the watchdog sees it.
type search struct {
	steps  atomic.Int64 // model steps taken
	abort  atomic.Bool  // set by the watchdog: refuse every step
	reason string       // why it was aborted (set before abort)
}

// model is lockModel with every step refused once s is aborted.
func (s *search) model() porcupine.Model {
	m := lockModel
	step := lockModel.Step
	m.Step = func(state, input, output interface{}) (bool, interface{}) {
		if s.abort.Load() {
			return false, nil
		}
		s.steps.Add(1)
		return step(state, input, output)
	}
	m.StepContext = nil
	return m
}

// watchdog gives up the biggest running search when the heap passes its
// budget (see LinearizabilityByKey).
type watchdog struct {
	budget  uint64
	mu      sync.Mutex
	running map[*search]bool
	done    chan struct{}
}

// heapSample is the live heap the watchdog compares with its budget.
var heapSample = func() uint64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return s[0].Value.Uint64()
}

func newWatchdog(budget int64) *watchdog {
	w := &watchdog{running: map[*search]bool{}, done: make(chan struct{})}
	if budget <= 0 {
		return w
	}
	w.budget = uint64(budget)
	go func() {
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-w.done:
				return
			case <-t.C:
				if heap := heapSample(); heap > w.budget {
					w.giveUp(heap)
				}
			}
		}
	}()
	return w
}

func (w *watchdog) giveUp(heap uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	var big *search
	for s := range w.running {
		if !s.abort.Load() && (big == nil || s.steps.Load() > big.steps.Load()) {
			big = s
		}
	}
	if big == nil {
		return
	}
	big.reason = fmt.Sprintf("memory: the heap reached %d MiB, over the %d MiB budget, after %d steps of this search", heap>>20, w.budget>>20, big.steps.Load())
	big.abort.Store(true)
	delete(w.running, big)
	// Let the next sample see the heap without the given-up cache.
	go runtime.GC()
}

func (w *watchdog) start() *search {
	s := &search{}
	w.mu.Lock()
	w.running[s] = true
	w.mu.Unlock()
	return s
}

func (w *watchdog) end(s *search) {
	w.mu.Lock()
	delete(w.running, s)
	w.mu.Unlock()
}

func (w *watchdog) stop() { close(w.done) }

// checkKey runs porcupine on one key's operations for at most budget
// (≤ 0: no bound) and not past deadline (zero: none), watched by wd.
func checkKey(ops []porcupine.Operation, budget time.Duration, deadline time.Time, wd *watchdog) KeyVerdict {
	v := KeyVerdict{Key: ops[0].Input.(lockInput).Key, Ops: len(ops), Result: porcupine.Unknown}
	what := fmt.Sprintf("the key's %v budget", budget)
	if !deadline.IsZero() {
		left := time.Until(deadline)
		if left <= 0 {
			v.NotChecked = "time: the check's overall budget (Options.LinearizabilityTimeout) was spent before its turn"
			return v
		}
		if budget <= 0 || left < budget {
			budget, what = left, fmt.Sprintf("the %v left of the check's overall budget", left.Round(time.Millisecond))
		}
	}
	s := wd.start()
	start := time.Now()
	v.Result = porcupine.CheckOperationsTimeout(s.model(), ops, max(budget, 0))
	v.Elapsed = time.Since(start)
	wd.end(s)
	switch {
	case s.abort.Load():
		v.Result, v.NotChecked = porcupine.Unknown, s.reason
	case v.Result == porcupine.Unknown:
		v.NotChecked = fmt.Sprintf("time: the search ran out of %s after %d steps", what, s.steps.Load())
	}
	return v
}

// Verdict sums up per-key verdicts: Ok when every key is Ok, Illegal when
// any key is, else Unknown; and how many keys are Unknown (not checked).
func Verdict(vs []KeyVerdict) (res porcupine.CheckResult, unknown int) {
	res = porcupine.Ok
	for _, v := range vs {
		switch v.Result {
		case porcupine.Illegal:
			res = porcupine.Illegal
		case porcupine.Unknown:
			unknown++
			if res == porcupine.Ok {
				res = porcupine.Unknown
			}
		}
	}
	return res, unknown
}
