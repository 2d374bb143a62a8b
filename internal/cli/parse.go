package cli

import (
	"fmt"
	"io"
	"strings"
)

// CheckArgs reports whether args (a lockgate command line without the
// program name) names a runnable command and parses with its flags and
// argument rules, without running anything: no config file or environment
// is read. Deployment files (docker-compose.yml) are tested with it so that
// a renamed or removed flag breaks the build, not a deployment.
func CheckArgs(args []string) error {
	root := NewRoot(io.Discard, io.Discard)
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if !cmd.Runnable() {
		return fmt.Errorf("%q is not a runnable command (a group: pick a subcommand)", strings.Join(args, " "))
	}
	if err := cmd.ParseFlags(rest); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateArgs(cmd.Flags().Args()); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if err := cmd.ValidateRequiredFlags(); err != nil {
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	return cmd.ValidateFlagGroups()
}
