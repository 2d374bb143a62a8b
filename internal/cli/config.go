package cli

import (
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"gopkg.in/yaml.v3"
)

// Every setting of every command comes from one of four layers. The first
// layer that sets it wins:
//
//	flag > environment (LOCKGATE_<FLAG_NAME>) > config file (--config) > default
//
// The layers apply generically to every flag of the running command,
// including flags added after this file was written: a flag --tls-key is
// read from LOCKGATE_TLS_KEY and from a `tls-key:` line of the file.
// A layer replaces a lower one's value whole; list values are not merged.

// EnvPrefix starts the name of every environment variable lockgate reads.
const EnvPrefix = "LOCKGATE_"

// Source names the layer a setting's effective value came from.
type Source string

// The layers, highest precedence first.
const (
	SourceFlag    Source = "flag"
	SourceEnv     Source = "env"
	SourceFile    Source = "file"
	SourceDefault Source = "default"
)

// origin is where one setting's value came from: the layer and, for the
// environment and the file, the variable or the file:line.
type origin struct {
	src   Source
	where string
}

// reservedEnv are LOCKGATE_ variables that are not settings: `lockgate run`
// sets them for its child command. They never fill a flag, even one whose
// name matches (lock renew|release --fencing-token): a lockgate command run
// under `lockgate run` must not take the parent's lease for its own.
var reservedEnv = map[string]bool{"LOCKGATE_FENCING_TOKEN": true, "LOCKGATE_LOCK_KEY": true}

// notSettings are flags that no environment variable or file sets.
var notSettings = map[string]bool{"help": true}

// EnvName is the environment variable of a flag: LOCKGATE_ and the flag's
// name upper-cased with dashes as underscores (data-dir → LOCKGATE_DATA_DIR).
func EnvName(flag string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// resolveConfig fills every flag of cmd that was not given on the command
// line from the environment, then from the config file named by --config
// (itself a flag or LOCKGATE_CONFIG), and returns each flag's origin.
// lookupEnv is os.LookupEnv outside tests. warn receives warnings about
// LOCKGATE_ variables that match no setting (they are not errors: the
// environment is inherited, not written for one command).
func resolveConfig(cmd *cobra.Command, fresh func() *cobra.Command, lookupEnv func(string) (string, bool), environ []string, warn io.Writer) (map[string]origin, error) {
	flags := cmd.Flags()
	origins := map[string]origin{}
	var err error
	flags.VisitAll(func(f *pflag.Flag) {
		switch {
		case err != nil || notSettings[f.Name]:
		case f.Changed:
			origins[f.Name] = origin{src: SourceFlag}
		default:
			origins[f.Name] = origin{src: SourceDefault}
			name := EnvName(f.Name)
			v, ok := lookupEnv(name)
			if !ok || reservedEnv[name] {
				return
			}
			if e := setScalar(flags, f, v); e != nil {
				err = fmt.Errorf("environment %s=%s: %w", name, quoteMasked(f.Name, v), e)
				return
			}
			origins[f.Name] = origin{src: SourceEnv, where: name}
		}
	})
	if err != nil {
		return nil, err
	}
	warnUnknownEnv(cmd.Root(), environ, warn)
	if f := flags.Lookup("config"); f != nil && f.Value.String() != "" {
		if err := applyConfigFile(cmd, fresh, f.Value.String(), origins); err != nil {
			return nil, err
		}
	}
	return origins, nil
}

// applyConfigFile sets, from a YAML mapping of `flag-name: value`, every
// flag of cmd whose origin is still the default, and records the file:line
// in origins. One file may serve every command: a setting of another
// command is checked (it must name a flag and have the right type) and
// otherwise skipped. A malformed file, an unknown setting, a duplicate or a
// value of the wrong type is an error naming the file, line and setting.
func applyConfigFile(cmd *cobra.Command, fresh func() *cobra.Command, path string, origins map[string]origin) error {
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
	seen := map[string]int{}
	var probe *cobra.Command // a fresh command tree to type-check other commands' settings
	for i := 0; i+1 < len(m.Content); i += 2 {
		k, v := m.Content[i], m.Content[i+1]
		at := func(line int) string { return fmt.Sprintf("%s:%d", path, line) }
		if first, dup := seen[k.Value]; dup {
			return fmt.Errorf("%s: setting %q given twice (first on line %d)", at(k.Line), k.Value, first)
		}
		seen[k.Value] = k.Line
		if k.Value == "config" || notSettings[k.Value] {
			return fmt.Errorf("%s: %q cannot be set in the config file", at(k.Line), k.Value)
		}
		if v.Kind == yaml.ScalarNode && v.Tag == "!!null" {
			continue // `setting:` with no value leaves the default
		}
		if f := flags.Lookup(k.Value); f != nil {
			if origins[f.Name].src != SourceDefault {
				continue // the command line or the environment wins
			}
			if line, err := setFromYAML(flags, f, v); err != nil {
				return fmt.Errorf("%s: setting %q: %w", at(line), k.Value, err)
			}
			origins[f.Name] = origin{src: SourceFile, where: at(k.Line)}
			continue
		}
		if probe == nil {
			probe = fresh()
		}
		others := flagsNamed(probe, k.Value)
		if len(others) == 0 {
			msg := fmt.Sprintf("%s: unknown setting %q", at(k.Line), k.Value)
			if s := suggest(k.Value, allSettingNames(probe)); s != "" {
				msg += fmt.Sprintf(" (did you mean %q?)", s)
			}
			return fmt.Errorf("%s", msg)
		}
		// A setting of another command: valid if some command takes it.
		var firstErr error
		var firstLine int
		for _, o := range others {
			line, err := setFromYAML(o.fs, o.f, v)
			if err == nil {
				firstErr = nil
				break
			}
			if firstErr == nil {
				firstErr, firstLine = err, line
			}
		}
		if firstErr != nil {
			return fmt.Errorf("%s: setting %q: %w", at(firstLine), k.Value, firstErr)
		}
	}
	return nil
}

// setFromYAML assigns a YAML value to f: a scalar; a sequence of scalars for
// list flags; a mapping of scalars for key=value flags. It returns the line
// at fault with the error.
func setFromYAML(flags *pflag.FlagSet, f *pflag.Flag, v *yaml.Node) (int, error) {
	kind := f.Value.Type()
	switch v.Kind {
	case yaml.ScalarNode:
		return v.Line, setScalar(flags, f, v.Value)
	case yaml.SequenceNode:
		sv, ok := f.Value.(pflag.SliceValue)
		if !ok {
			return v.Line, fmt.Errorf("got a list, want %s", describeType(kind))
		}
		items := make([]string, 0, len(v.Content))
		for _, item := range v.Content {
			if item.Kind != yaml.ScalarNode {
				return item.Line, fmt.Errorf("list items must be plain values, want %s", describeType(kind))
			}
			items = append(items, item.Value)
		}
		// Replace, not Set: Set would split an item at its commas.
		if err := sv.Replace(items); err != nil {
			return v.Line, fmt.Errorf("got %v, want %s", items, describeType(kind))
		}
		f.Changed = true // satisfies MarkFlagRequired like a flag would
		return v.Line, nil
	case yaml.MappingNode:
		if kind != "stringToString" {
			return v.Line, fmt.Errorf("got a mapping, want %s", describeType(kind))
		}
		pairs := make([]string, 0, len(v.Content)/2)
		for i := 0; i+1 < len(v.Content); i += 2 {
			if v.Content[i+1].Kind != yaml.ScalarNode {
				return v.Content[i+1].Line, fmt.Errorf("mapping values must be plain values")
			}
			pairs = append(pairs, v.Content[i].Value+"="+v.Content[i+1].Value)
		}
		return v.Line, setScalar(flags, f, strings.Join(pairs, ","))
	}
	return v.Line, fmt.Errorf("want %s", describeType(kind))
}

// setScalar sets f from one string (a flag's command-line form), with an
// error that names the expected type.
func setScalar(flags *pflag.FlagSet, f *pflag.Flag, s string) error {
	if err := flags.Set(f.Name, s); err != nil {
		return fmt.Errorf("got %s, want %s", quoteMasked(f.Name, s), describeType(f.Value.Type()))
	}
	return nil
}

// describeType says in words what a pflag value type accepts.
func describeType(t string) string {
	switch t {
	case "string":
		return "a string"
	case "bool":
		return "a boolean (true or false)"
	case "int", "int8", "int16", "int32", "int64":
		return "an integer"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a non-negative integer"
	case "float32", "float64":
		return "a number"
	case "duration":
		return "a duration such as 500ms, 10s or 1m30s"
	case "stringSlice", "stringArray":
		return "a list of strings (a YAML list, or comma-separated)"
	case "intSlice", "uintSlice", "int32Slice", "int64Slice":
		return "a list of integers"
	case "durationSlice":
		return "a list of durations"
	case "stringToString":
		return "a mapping of key: value (or key=value,...)"
	}
	return "a " + t
}

// quoteMasked quotes a value for an error message, masked if the setting
// holds a secret.
func quoteMasked(name, value string) string {
	return fmt.Sprintf("%q", maskValue(name, value))
}

// namedFlag is one command's flag of a given name.
type namedFlag struct {
	fs *pflag.FlagSet
	f  *pflag.Flag
}

// flagsNamed returns every flag called name in the tree under c.
func flagsNamed(c *cobra.Command, name string) []namedFlag {
	var out []namedFlag
	for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
		if f := fs.Lookup(name); f != nil {
			out = append(out, namedFlag{fs, f})
		}
	}
	for _, sub := range c.Commands() {
		out = append(out, flagsNamed(sub, name)...)
	}
	return out
}

// allSettingNames is the sorted set of flag names in the tree under c.
func allSettingNames(c *cobra.Command) []string {
	set := map[string]bool{}
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		for _, fs := range []*pflag.FlagSet{c.LocalNonPersistentFlags(), c.PersistentFlags()} {
			fs.VisitAll(func(f *pflag.Flag) {
				if !notSettings[f.Name] {
					set[f.Name] = true
				}
			})
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(c)
	names := make([]string, 0, len(set))
	for n := range set {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// warnUnknownEnv warns about LOCKGATE_ variables that no command reads.
func warnUnknownEnv(root *cobra.Command, environ []string, w io.Writer) {
	var names []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, EnvPrefix) && !reservedEnv[name] {
			names = append(names, name)
		}
	}
	if len(names) == 0 {
		return
	}
	known := map[string]bool{}
	var envNames []string
	for _, n := range allSettingNames(root) {
		known[EnvName(n)] = true
		envNames = append(envNames, EnvName(n))
	}
	for _, name := range names {
		if known[name] {
			continue
		}
		msg := fmt.Sprintf("%s: warning: environment variable %s matches no setting", root.Name(), name)
		if s := suggest(name, envNames); s != "" {
			msg += fmt.Sprintf(" (did you mean %s?)", s)
		}
		fmt.Fprintln(w, msg)
	}
}

// suggest returns the candidate closest to s by edit distance, if it is
// close enough to be a likely typo.
func suggest(s string, candidates []string) string {
	best, bestD := "", 3 // at most two edits
	for _, c := range candidates {
		if d := editDistance(strings.ToLower(s), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
