package testenv

import (
	"fmt"
	"os"
	"runtime"
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
// Only the methods testenv uses are implemented; failures go to stderr.
type ProcessTB struct {
	testing.TB
	name     string
	mu       sync.Mutex
	cleanups []func()
	failed   bool
}

// NewProcessTB returns a ProcessTB called name.
func NewProcessTB(name string) *ProcessTB { return &ProcessTB{name: name} }

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

func (t *ProcessTB) Helper()                   {}
func (t *ProcessTB) Name() string              { return t.name }
func (t *ProcessTB) Log(args ...any)           {}
func (t *ProcessTB) Logf(string, ...any)       {}
func (t *ProcessTB) Cleanup(f func())          { t.mu.Lock(); t.cleanups = append(t.cleanups, f); t.mu.Unlock() }
func (t *ProcessTB) Error(a ...any)            { fmt.Fprintln(os.Stderr, a...); t.fail() }
func (t *ProcessTB) Errorf(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...); t.fail() }
func (t *ProcessTB) Fatal(a ...any)            { t.Error(a...); runtime.Goexit() }
func (t *ProcessTB) Fatalf(f string, a ...any) { t.Errorf(f, a...); runtime.Goexit() }
func (t *ProcessTB) Skip(a ...any)             { t.Fatal(a...) }
func (t *ProcessTB) Skipf(f string, a ...any)  { t.Fatalf(f, a...) }
func (t *ProcessTB) Failed() bool              { t.mu.Lock(); defer t.mu.Unlock(); return t.failed }
func (t *ProcessTB) fail()                     { t.mu.Lock(); t.failed = true; t.mu.Unlock() }
