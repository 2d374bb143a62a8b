package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

func newConfigCmd(fresh func() *cobra.Command) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "config",
		Short: "Show the effective configuration",
		Long: `Every setting of every command is a flag, an environment variable and a
config-file line, with one precedence, highest first:

  flag > environment > config file > default

  flag         --data-dir /var/lib/lockgate
  environment  LOCKGATE_DATA_DIR=/var/lib/lockgate   (LOCKGATE_ + the flag name
               upper-cased, dashes as underscores; lists comma-separated)
  config file  data-dir: /var/lib/lockgate           (the YAML file of --config
               or LOCKGATE_CONFIG; lists as YAML lists)

A layer replaces a lower one's value whole (lists are not merged). One file
may hold the settings of several commands; each command takes its own.`,
		Args: cobra.NoArgs,
	}
	cmd.AddCommand(newConfigPrintCmd(fresh))
	return cmd
}

// settingView is one line of `config print`.
type settingView struct {
	Name   string `json:"name"`
	Value  string `json:"value"`
	Source Source `json:"source"`
	// Where is the environment variable or file:line it came from.
	Where string `json:"where,omitempty"`
}

func newConfigPrintCmd(fresh func() *cobra.Command) *cobra.Command {
	var (
		forCmd string
		asJSON bool
	)
	cmd := &cobra.Command{
		Use:   "print [--for COMMAND] [-- COMMAND-FLAGS...]",
		Short: "Print each setting of a command, its value and where it came from (secrets masked)",
		Long: `Print the effective configuration of COMMAND (default: the settings every
command shares): each setting, its value and its source (flag, env, file or
default), as the command would see it when started here with this
environment, this --config file and the flags after --.

Secrets are masked: any setting whose name contains token, password or secret,
and the password in URLs and key=value strings
(postgres://user:pass@host → postgres://user:****@host).

  lockgate config print --for node
  lockgate --config /etc/lockgate.yaml config print --for "lock acquire"
  lockgate config print --for serve -- --backend postgres`,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.ArgsLenAtDash() < 0 && len(args) > 0 {
				return fmt.Errorf("unexpected argument %q: put COMMAND in --for and its flags after --", args[0])
			}
			views, title, err := effectiveConfig(cmd, fresh, forCmd, args)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(views)
			}
			return printSettings(out, title, views)
		},
	}
	cmd.Flags().StringVar(&forCmd, "for", "", `the command whose settings to show, e.g. node, serve, "bench latency" (default: the shared settings)`)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the settings as JSON")
	return cmd
}

// effectiveConfig resolves the settings of the command path forCmd in a
// fresh command tree of the program (fresh), as if it were started with flags plus the shared
// flags (--config, --log-level) given to `config print` itself.
func effectiveConfig(self *cobra.Command, fresh func() *cobra.Command, forCmd string, flags []string) ([]settingView, string, error) {
	root := fresh()
	target := root
	if path := strings.Fields(forCmd); len(path) > 0 {
		c, rest, err := root.Find(path)
		if err != nil || len(rest) > 0 || c == root {
			return nil, "", fmt.Errorf("--for %q: no such command (try %s --help)", forCmd, root.Name())
		}
		target = c
	}
	if err := target.ParseFlags(flags); err != nil {
		return nil, "", fmt.Errorf("flags for %s: %w", target.CommandPath(), err)
	}
	// The shared flags given to `config print` on its command line apply
	// to the target too.
	given := originsFrom(self.Context())
	var err error
	self.InheritedFlags().VisitAll(func(f *pflag.Flag) {
		if given[f.Name].src == SourceFlag && err == nil && !target.Flags().Changed(f.Name) {
			err = target.Flags().Set(f.Name, f.Value.String())
		}
	})
	if err != nil {
		return nil, "", err
	}
	origins, err := resolveConfig(target, fresh, os.LookupEnv, nil, io.Discard)
	if err != nil {
		return nil, "", err
	}
	var views []settingView
	target.Flags().VisitAll(func(f *pflag.Flag) {
		o, ok := origins[f.Name]
		if !ok {
			return
		}
		views = append(views, settingView{Name: f.Name, Value: displayValue(f), Source: o.src, Where: o.where})
	})
	return views, target.CommandPath(), nil
}

// displayValue is a flag's value as `config print` shows it, masked.
func displayValue(f *pflag.Flag) string {
	if sv, ok := f.Value.(pflag.SliceValue); ok {
		items := append([]string(nil), sv.GetSlice()...)
		for i, s := range items {
			items[i] = maskValue(f.Name, s)
		}
		if IsSecret(f.Name) && len(items) > 0 {
			return Mask
		}
		return strings.Join(items, ",")
	}
	return maskValue(f.Name, f.Value.String())
}

// printSettings writes the settings as a table.
func printSettings(w io.Writer, title string, views []settingView) error {
	fmt.Fprintf(w, "# %s: effective configuration (flag > env > file > default; secrets masked)\n", title)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SETTING\tVALUE\tSOURCE\tFROM")
	for _, v := range views {
		val := v.Value
		if val == "" {
			val = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", v.Name, val, v.Source, v.Where)
	}
	return tw.Flush()
}
