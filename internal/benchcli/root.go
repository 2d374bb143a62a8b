// Package benchcli holds lockgate-bench's cobra commands: the bench, a
// program apart from the lockgate binary, so that the server and its CLI
// do not link the peer libraries, toxiproxy, the report's charts or
// porcupine. cmd/lockgate-bench calls Main.
package benchcli

import (
	"io"

	"github.com/spf13/cobra"

	"github.com/lockgate/lockgate/internal/cli"
)

// Main runs lockgate-bench's command line args and returns the process
// exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	return cli.Execute(NewRoot(stdout, stderr), args, stderr)
}

// NewRoot builds lockgate-bench's root command with every bench command.
// Output goes to stdout and stderr so that tests can capture it.
func NewRoot(stdout, stderr io.Writer) *cobra.Command {
	root := cli.NewProgram("lockgate-bench", "Measure the backends side by side: latency, and safety under faults",
		`lockgate-bench measures every backend of lockgate, and the peer libraries
its users would otherwise pick, side by side: latency workloads, fault
campaigns whose histories are checked, leader election, scale, tenants
and an upgrade drill. It starts the servers it needs as real processes on
127.0.0.1 (the raftlock nodes are the lockgate binary: --lockgate).`, stdout, stderr,
		func() *cobra.Command { return NewRoot(io.Discard, io.Discard) })
	root.PersistentFlags().String(lockgateFlag, "", "the lockgate binary the bench runs as raftlock nodes, campaigners and the upgrade's newer binary (default: lockgate beside this program, else one built from the source tree around the working directory, else lockgate on PATH)")
	root.AddCommand(newBenchLatencyCmd(), newBenchChaosCmd(), newBenchMatrixCmd(), newBenchCheckCmd(), newBenchCompareCmd(),
		newBenchElectionCmd(), newBenchCampaignCmd(), newBenchScaleCmd())
	root.AddCommand(newBenchUpgradeCmd())
	root.AddCommand(newBenchTenantsCmd())
	root.AddCommand(newBenchSoakCmd())
	return root
}
