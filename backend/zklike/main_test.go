package zklike

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/lockgate/lockgate/internal/testenv"
)

// ExampleEtcdEndpoints are the client URLs of the etcd cluster the
// examples (example_test.go, package zklike_test) lock on: the benchmarks'
// cluster when benchmarks run, else a one-member cluster TestMain starts
// for them. The tests start clusters of their own, as they inject faults.
var ExampleEtcdEndpoints []string

func TestMain(m *testing.M) {
	flag.Parse()
	var (
		servers *serverTB
		failure string
	)
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		servers = startServers("BenchmarkServers", func(tb testing.TB) { benchEtcd = testenv.StartEtcd(tb, 3) })
		if servers.Failed() {
			fmt.Fprintln(os.Stderr, "zklike benchmarks: starting etcd failed:", servers.Errors())
			os.Exit(1)
		}
		ExampleEtcdEndpoints = benchEtcd.Endpoints
	} else {
		servers = startServers("ExampleServer", func(tb testing.TB) { ExampleEtcdEndpoints = testenv.StartEtcd(tb, 1).Endpoints })
		failure = withoutExamples(servers, "etcd")
	}
	code := m.Run()
	servers.Close()
	if failure != "" {
		fmt.Fprintln(os.Stderr, failure)
		code = 1
	}
	os.Exit(code)
}

// serverTB is a testenv.ProcessTB (servers that live as long as the test
// binary) that tells testenv's skip (a server binary is not installed and
// CI is not "true") from a failure.
type serverTB struct {
	*testenv.ProcessTB
	skipped bool
}

func (t *serverTB) Skip(a ...any)            { t.skipped = true; t.ProcessTB.Skip(a...) }
func (t *serverTB) Skipf(f string, a ...any) { t.skipped = true; t.ProcessTB.Skipf(f, a...) }

// startServers runs start, which starts servers with testenv, on a
// goroutine of its own (a Fatal or Skip ends only start) against a serverTB
// called name, and returns that serverTB: Close stops the servers, Failed
// says whether start failed or skipped.
func startServers(name string, start func(testing.TB)) *serverTB {
	tb := &serverTB{ProcessTB: testenv.NewProcessTB(name)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		start(tb)
	}()
	<-done
	return tb
}

// withoutExamples, when the examples' server did not start, leaves the
// examples out of the run: an example cannot skip itself, and without its
// server it would fail with an output mismatch that hides the reason (which
// testenv wrote to stderr). It returns why the package must fail for it, or
// "": not when testenv skipped, as it skips the package's other server
// tests then.
func withoutExamples(tb *serverTB, server string) (failure string) {
	if !tb.Failed() {
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
	if tb.skipped {
		fmt.Fprintf(os.Stderr, "examples skipped: %s is not installed\n", server)
		return ""
	}
	return fmt.Sprintf("FAIL: examples not run: %s did not start: %s", server, tb.Errors())
}
