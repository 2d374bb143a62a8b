package cli

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// applyConfigFile sets, from a YAML file of `flag-name: value` pairs, every
// flag of cmd that was not given on the command line. Precedence: command
// line, then file, then the flag's default. One file may serve every
// command: settings of other commands are skipped. A setting no command
// knows, a value of the wrong type or a malformed file is an error that
// names the file, line and setting.
func applyConfigFile(cmd *cobra.Command, path string) error {
	if path == "" {
		return nil
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("--config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if len(doc.Content) == 0 {
		return nil // an empty file sets nothing
	}
	m := doc.Content[0]
	if m.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: want a mapping of setting: value", path, m.Line)
	}
	flags := cmd.Flags()
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		f := flags.Lookup(k.Value)
		if f == nil || k.Value == "config" {
			if k.Value != "config" && anyCommandHasFlag(cmd.Root(), k.Value) {
				continue // a setting of another command: one file serves all
			}
			return fmt.Errorf("%s:%d: unknown setting %q", path, k.Line, k.Value)
		}
		if f.Changed {
			continue // the command line wins
		}
		if err := setFlag(flags, f, v); err != nil {
			return fmt.Errorf("%s:%d: setting %q: %w", path, v.Line, k.Value, err)
		}
	}
	return nil
}

// anyCommandHasFlag reports whether any command in the tree has the flag.
func anyCommandHasFlag(c *cobra.Command, name string) bool {
	if c.Flags().Lookup(name) != nil || c.PersistentFlags().Lookup(name) != nil {
		return true
	}
	for _, sub := range c.Commands() {
		if anyCommandHasFlag(sub, name) {
			return true
		}
	}
	return false
}

// setFlag assigns a YAML scalar, or a sequence of scalars for list flags.
func setFlag(flags *pflag.FlagSet, f *pflag.Flag, v *yaml.Node) error {
	switch v.Kind {
	case yaml.ScalarNode:
		return flags.Set(f.Name, v.Value)
	case yaml.SequenceNode:
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return fmt.Errorf("list items must be plain values")
			}
			if err := flags.Set(f.Name, item.Value); err != nil {
				return err
			}
		}
		return nil
	}
	return fmt.Errorf("want a value or a list of values")
}
