package sqllock

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/lockgate/lockgate/internal/testenv"
)

// sharedServer is the PostgreSQL server shared by every benchmark (ours and
// the raw SQL baseline, in the same run), by the tests that do not
// inject faults into it (each uses keys or tables of its own) and by the
// examples. TestMain starts it.
var sharedServer *testenv.Postgres

// ExamplePostgresURL is the connection URL of sharedServer, for the
// examples (example_test.go, package sqllock_test).
var ExamplePostgresURL string

func TestMain(m *testing.M) {
	flag.Parse()
	tb := testenv.StartProcess("SharedServer", func(tb testing.TB) { sharedServer = testenv.StartPostgres(tb) })
	var failure string
	if tb.Failed() {
		sharedServer = nil
		if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
			fmt.Fprintln(os.Stderr, "sqllock benchmarks: starting PostgreSQL failed")
			os.Exit(1)
		}
		failure = tb.WithoutExamples("PostgreSQL")
	} else {
		ExamplePostgresURL = sharedServer.URL
	}
	code := m.Run()
	tb.Close()
	if failure != "" {
		fmt.Fprintln(os.Stderr, failure)
		code = 1
	}
	os.Exit(code)
}
