// Command lockgate is the distributed lock service: its nodes, gateway and
// tools in one binary (the bench is lockgate-bench). See internal/cli for
// the commands.
package main

import (
	"os"

	"github.com/lockgate/lockgate/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], os.Stdout, os.Stderr))
}
