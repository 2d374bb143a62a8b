package redlock

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/lockgate/lockgate/internal/testenv"
)

// ExampleRedisAddr is the address of the redis-server the examples
// (example_test.go, package redlock_test) lock on: one of the benchmarks'
// servers when benchmarks run, else one TestMain starts for them. The tests
// start servers of their own, as they inject faults.
var ExampleRedisAddr string

func TestMain(m *testing.M) {
	flag.Parse()
	var (
		servers *testenv.ProcessTB
		failure string
	)
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		servers = testenv.StartProcess("BenchmarkServers", func(tb testing.TB) { benchServers = testenv.StartRedisN(tb, 5) })
		if servers.Failed() {
			fmt.Fprintln(os.Stderr, "redlock benchmarks: starting redis-server failed")
			os.Exit(1)
		}
		ExampleRedisAddr = benchServers[0].Addr
	} else {
		servers = testenv.StartProcess("ExampleServer", func(tb testing.TB) { ExampleRedisAddr = testenv.StartRedis(tb).Addr })
		failure = servers.WithoutExamples("redis-server")
	}
	code := m.Run()
	if benchServers != nil && os.Getenv("REDLOCK_BENCH_STATS") != "" {
		c := redis.NewClient(&redis.Options{Addr: benchServers[0].Addr})
		fmt.Println(c.Info(context.Background(), "commandstats").Val())
		c.Close()
	}
	servers.Close()
	if failure != "" {
		fmt.Fprintln(os.Stderr, failure)
		code = 1
	}
	os.Exit(code)
}
