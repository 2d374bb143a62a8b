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
		servers *testenv.ProcessTB
		failure string
	)
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		servers = testenv.StartProcess("BenchmarkServers", func(tb testing.TB) { benchEtcd = testenv.StartEtcd(tb, 3) })
		if servers.Failed() {
			fmt.Fprintln(os.Stderr, "zklike benchmarks: starting etcd failed:", servers.Errors())
			os.Exit(1)
		}
		ExampleEtcdEndpoints = benchEtcd.Endpoints
	} else {
		servers = testenv.StartProcess("ExampleServer", func(tb testing.TB) { ExampleEtcdEndpoints = testenv.StartEtcd(tb, 1).Endpoints })
		failure = servers.WithoutExamples("etcd")
	}
	code := m.Run()
	servers.Close()
	if failure != "" {
		fmt.Fprintln(os.Stderr, failure)
		code = 1
	}
	os.Exit(code)
}
