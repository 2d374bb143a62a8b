// Command lockgate-bench is lockgate's bench: every backend, ours and the
// peer libraries, measured side by side. See internal/benchcli for the
// commands.
package main

import (
	"os"

	"github.com/lockgate/lockgate/internal/benchcli"
)

func main() {
	os.Exit(benchcli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
