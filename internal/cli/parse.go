package cli

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// CheckArgs reports whether args (a lockgate command line without the
// program name), started with the LOCKGATE_ variables of env, names a
// runnable command that accepts its flags, arguments and environment,
// without running anything or reading a config file. A LOCKGATE_ variable
// that is not a setting of that command is an error here (a deployment file
// is written for one command; a typo there would silently do nothing).
// Deployment files (docker-compose.yml) are tested with it so that a
// renamed or removed flag breaks the build, not a deployment.
func CheckArgs(args []string, env map[string]string) error {
	return CheckArgsOf(NewRoot(io.Discard, io.Discard), args, env)
}

// CheckArgsOf is CheckArgs for the program whose root is root (NewProgram).
func CheckArgsOf(root *cobra.Command, args []string, env map[string]string) error {
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
	known := map[string]bool{}
	cmd.Flags().VisitAll(func(f *pflag.Flag) { known[EnvName(f.Name)] = true })
	var names []string
	for name := range env {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if strings.HasPrefix(name, EnvPrefix) && !known[name] && !reservedEnv[name] {
			return fmt.Errorf("%s: environment %s is not one of its settings", cmd.CommandPath(), name)
		}
	}
	// The environment layer only: the config file is not read (it names a
	// path inside the container). A file set there would be read at start,
	// whether named by LOCKGATE_CONFIG or by --config; its settings may
	// then fill required flags too.
	file := false
	if f := cmd.Flags().Lookup("config"); f != nil && f.Value.String() != "" {
		file = true
		if err := f.Value.Set(""); err != nil {
			return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
		}
	}
	lookup := func(name string) (string, bool) {
		if name == EnvName("config") {
			return "", false
		}
		v, ok := env[name]
		return v, ok
	}
	if _, err := resolveConfig(cmd, nil, lookup, nil, io.Discard); err != nil { // no file read: no fresh tree needed
		return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
	}
	if _, named := env[EnvName("config")]; !file && !named {
		if err := cmd.ValidateRequiredFlags(); err != nil {
			return fmt.Errorf("%s: %w", cmd.CommandPath(), err)
		}
	}
	return cmd.ValidateFlagGroups()
}
