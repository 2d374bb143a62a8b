package cli

import (
	"fmt"
	"runtime"

	"github.com/spf13/cobra"
)

// Version and Commit are set at build time by the Makefile
// (-ldflags "-X github.com/lockgate/lockgate/internal/cli.Version=...").
var (
	Version = "dev"
	Commit  = "unknown"
)

func newVersionCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			_, err := fmt.Fprintf(cmd.OutOrStdout(), "%s %s (commit %s, %s, %s/%s)\n",
				cmd.Root().Name(), Version, Commit, runtime.Version(), runtime.GOOS, runtime.GOARCH)
			return err
		},
	}
}
