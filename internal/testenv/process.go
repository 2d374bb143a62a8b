package testenv

import (
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"sync"
	"testing"
)

// ProcessTB is a testing.TB for servers that live as long as the test
// binary: a TestMain has no testing.TB, and a benchmark's cleanups run when
// it ends, so servers shared by several benchmarks (ours and a baseline's, in
// the same run) are started against a ProcessTB:
//
//	tb := testenv.NewProcessTB("BenchmarkServers")
//	ok := tb.Do(func(tb testing.TB) { servers = testenv.StartRedisN(tb, 5) })
//	code := m.Run()
//	tb.Close()
//
// Only the methods testenv uses are implemented.
type ProcessTB struct {
	testing.TB
	// Out receives the servers' output (Log) and failures; nil: failures
	// go to stderr and the output is discarded.
	Out io.Writer

	name     string
	outMu    sync.Mutex // serialises writes to Out
	mu       sync.Mutex
	cleanups []func()
	errs     []string
	skipped  bool
}

// NewProcessTB returns a ProcessTB called name.
func NewProcessTB(name string) *ProcessTB { return &ProcessTB{name: name} }

// StartProcess runs start, which starts servers with testenv, against a
// new ProcessTB called name (a Fatal or Skip ends only start) and returns
// it: Close stops the servers; Failed and Skipped say how start ended.
func StartProcess(name string, start func(testing.TB)) *ProcessTB {
	t := NewProcessTB(name)
	t.Do(start)
	return t
}

// Do runs f with t on a goroutine of its own, so that a Fatal inside f ends
// only f, and reports whether t has not failed.
func (t *ProcessTB) Do(f func(tb testing.TB)) bool {
	done := make(chan struct{})
	go func() {
		defer close(done)
		f(t)
	}()
	<-done
	return !t.Failed()
}

// Close runs the cleanups, last registered first: it stops the servers.
func (t *ProcessTB) Close() {
	t.mu.Lock()
	cs := t.cleanups
	t.cleanups = nil
	t.mu.Unlock()
	for i := len(cs) - 1; i >= 0; i-- {
		cs[i]()
	}
}

// Failed reports whether an Error, Fatal or Skip happened.
func (t *ProcessTB) Failed() bool { t.mu.Lock(); defer t.mu.Unlock(); return len(t.errs) > 0 }

// Errors returns the failure messages, one per line.
func (t *ProcessTB) Errors() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(t.errs, "\n")
}

func (t *ProcessTB) fail(msg string) {
	msg = strings.TrimSuffix(msg, "\n")
	t.mu.Lock()
	t.errs = append(t.errs, msg)
	t.mu.Unlock()
	t.write(os.Stderr, fmt.Sprintf("%s: %s\n", t.name, msg))
}

// write writes s to Out (or to fallback when Out is nil), one writer at a
// time: every server's output pump logs concurrently.
func (t *ProcessTB) write(fallback io.Writer, s string) {
	w := t.Out
	if w == nil {
		w = fallback
	}
	if w == nil {
		return
	}
	t.outMu.Lock()
	defer t.outMu.Unlock()
	io.WriteString(w, s)
}

func (t *ProcessTB) Log(a ...any)            { t.write(nil, fmt.Sprintln(a...)) }
func (t *ProcessTB) Logf(f string, a ...any) { t.write(nil, fmt.Sprintf(f+"\n", a...)) }

func (t *ProcessTB) Helper()                   {}
func (t *ProcessTB) Name() string              { return t.name }
func (t *ProcessTB) Cleanup(f func())          { t.mu.Lock(); t.cleanups = append(t.cleanups, f); t.mu.Unlock() }
func (t *ProcessTB) Error(a ...any)            { t.fail(fmt.Sprintln(a...)) }
func (t *ProcessTB) Errorf(f string, a ...any) { t.fail(fmt.Sprintf(f, a...)) }
func (t *ProcessTB) Fatal(a ...any)            { t.Error(a...); runtime.Goexit() }
func (t *ProcessTB) Fatalf(f string, a ...any) { t.Errorf(f, a...); runtime.Goexit() }
func (t *ProcessTB) Skip(a ...any)             { t.markSkipped(); t.Fatal(a...) }
func (t *ProcessTB) Skipf(f string, a ...any)  { t.markSkipped(); t.Fatalf(f, a...) }

func (t *ProcessTB) markSkipped() { t.mu.Lock(); t.skipped = true; t.mu.Unlock() }

// Skipped reports whether a Skip happened: testenv skips when a server's
// binary is not installed and CI is not "true".
func (t *ProcessTB) Skipped() bool { t.mu.Lock(); defer t.mu.Unlock(); return t.skipped }

// WithoutExamples is for a TestMain whose examples lock on the servers
// started against t: when they did not start, it leaves the examples out of
// the run (an example cannot skip itself, and without its server it would
// fail with an output mismatch that hides the reason, which testenv wrote
// to stderr). It returns why the package must fail for it, or "" when the
// servers started or testenv skipped (as it skips the package's other
// server tests then). Call it after flag.Parse and before m.Run.
func (t *ProcessTB) WithoutExamples(server string) (failure string) {
	if !t.Failed() {
		return ""
	}
	skip := flag.Lookup("test.skip").Value
	pattern := "^Example"
	if s := skip.String(); s != "" {
		pattern = s + "|" + pattern
	}
	if err := skip.Set(pattern); err != nil {
		panic(err)
	}
	if t.Skipped() {
		fmt.Fprintf(os.Stderr, "examples skipped: %s is not installed\n", server)
		return ""
	}
	return fmt.Sprintf("FAIL: examples not run: %s did not start: %s", server, t.Errors())
}
