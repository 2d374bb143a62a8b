package deploy

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"

	lgcli "github.com/lockgate/lockgate/internal/cli"
	"github.com/lockgate/lockgate/internal/testenv"
)

const (
	unitFile = "systemd/lockgate.service"
	// unitBinary is where the unit runs lockgate from.
	unitBinary = "/usr/local/bin/lockgate"
)

// unitSetting is one Key=Value line of a unit file.
type unitSetting struct {
	section, key, value string
	line                int
}

// readUnit returns a unit file's settings in order (repeated keys
// repeated; no continuation lines: the unit has none).
func readUnit(t *testing.T, path string) []unitSetting {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []unitSetting
	section := ""
	for i, l := range strings.Split(string(data), "\n") {
		l = strings.TrimSpace(l)
		switch {
		case l == "" || l[0] == '#' || l[0] == ';':
		case strings.HasPrefix(l, "[") && strings.HasSuffix(l, "]"):
			section = l[1 : len(l)-1]
		default:
			k, v, ok := strings.Cut(l, "=")
			if !ok || strings.HasSuffix(l, "\\") {
				t.Fatalf("%s:%d: not Key=Value: %q", path, i+1, l)
			}
			out = append(out, unitSetting{section, strings.TrimSpace(k), strings.TrimSpace(v), i + 1})
		}
	}
	return out
}

// values returns the values of section's key, in order.
func values(us []unitSetting, section, key string) []string {
	var out []string
	for _, u := range us {
		if u.section == section && u.key == key {
			out = append(out, u.value)
		}
	}
	return out
}

// docConfig is the production layout's lockgate.yaml in
// docs/operations.md.
func docConfig(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(operationsDoc)
	if err != nil {
		t.Fatal(err)
	}
	_, after, ok := strings.Cut(string(data), "```yaml\n# /etc/lockgate/lockgate.yaml on host lock-1\n")
	block, _, ok2 := strings.Cut(after, "```")
	if !ok || !ok2 {
		t.Fatalf("%s: no lockgate.yaml example", operationsDoc)
	}
	return block
}

// docDataDir is the data-dir of docConfig.
func docDataDir(t *testing.T) string {
	t.Helper()
	var cfg map[string]any
	if err := yaml.Unmarshal([]byte(docConfig(t)), &cfg); err != nil {
		t.Fatalf("%s: lockgate.yaml example: %v", operationsDoc, err)
	}
	d, _ := cfg["data-dir"].(string)
	if d == "" {
		t.Fatalf("%s: the lockgate.yaml example has no data-dir", operationsDoc)
	}
	return d
}

// TestSystemdUnit: the unit runs `lockgate node` on the documented
// configuration file (a command line the real CLI accepts), restarts it
// on failure, gives a stop the time a leadership handover takes, allows
// more descriptors than --max-conns, and is hardened: writes only to the
// data directory of docs/operations.md's layout, no capabilities, no new
// privileges, a system call allow list.
func TestSystemdUnit(t *testing.T) {
	us := readUnit(t, unitFile)
	one := func(key string) string {
		v := values(us, "Service", key)
		if len(v) != 1 {
			t.Errorf("%s: [Service] %s given %d times, want once", unitFile, key, len(v))
			return ""
		}
		return v[0]
	}
	exec := strings.Fields(one("ExecStart"))
	if len(exec) == 0 || exec[0] != unitBinary {
		t.Fatalf("ExecStart %q: want %s first", exec, unitBinary)
	}
	// The CLI reads the file a --config flag names: give it the layout's
	// lockgate.yaml from docs/operations.md.
	yamlPath := filepath.Join(t.TempDir(), "lockgate.yaml")
	if err := os.WriteFile(yamlPath, []byte(docConfig(t)), 0o644); err != nil {
		t.Fatal(err)
	}
	args := slices.Clone(exec[1:])
	if i := slices.Index(args, "/etc/lockgate/lockgate.yaml"); i >= 0 {
		args[i] = yamlPath
	}
	if err := lgcli.CheckArgs(args, nil); err != nil {
		t.Errorf("ExecStart %q, with docs/operations.md's lockgate.yaml: the CLI refuses it: %v", exec, err)
	}
	if cfg, _ := flagValue(exec, "config"); cfg != "/etc/lockgate/lockgate.yaml" {
		t.Errorf("ExecStart reads config %q, want /etc/lockgate/lockgate.yaml (docs/operations.md)", cfg)
	}
	if i := slices.Index(exec, "node"); i < 0 {
		t.Errorf("ExecStart %q does not run lockgate node", exec)
	}

	want := map[string]string{
		"Restart": "on-failure", "User": "lockgate", "Group": "lockgate",
		"NoNewPrivileges": "yes", "ProtectSystem": "strict", "ProtectHome": "yes", "PrivateTmp": "yes",
		"PrivateDevices": "yes", "ProtectKernelTunables": "yes", "ProtectKernelModules": "yes", "ProtectKernelLogs": "yes",
		"ProtectControlGroups": "yes", "MemoryDenyWriteExecute": "yes", "CapabilityBoundingSet": "",
		"RestrictAddressFamilies": "AF_INET AF_INET6 AF_UNIX", "SystemCallArchitectures": "native",
	}
	for k, v := range want {
		if got := one(k); got != v {
			t.Errorf("%s: %s=%s, want %s=%s", unitFile, k, got, k, v)
		}
	}
	if f := values(us, "Service", "SystemCallFilter"); len(f) == 0 || f[0] != "@system-service" {
		t.Errorf("SystemCallFilter %q: want @system-service first", f)
	}

	dur := func(key string) time.Duration {
		d, err := time.ParseDuration(one(key))
		if err != nil {
			t.Errorf("%s=%s: want a duration like 5s: %v", key, one(key), err)
		}
		return d
	}
	if d := dur("RestartSec"); d < time.Second || d > 30*time.Second {
		t.Errorf("RestartSec=%s: want 1–30 s (a crash loop must not spin, a restart must not wait long)", d)
	}
	// Stopping: the HTTP server's shutdown (up to 5 s), a leadership
	// transfer (up to two 1 s election timeouts), the log's flush.
	if d := dur("TimeoutStopSec"); d < 10*time.Second {
		t.Errorf("TimeoutStopSec=%s: too short for a graceful stop with a leadership handover", d)
	}

	node, _, err := lgcli.NewRoot(io.Discard, io.Discard).Find([]string{"node"})
	if err != nil {
		t.Fatal(err)
	}
	maxConns, err := strconv.Atoi(node.Flags().Lookup("max-conns").DefValue)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := strconv.Atoi(one("LimitNOFILE")); err != nil || n < maxConns+256 {
		t.Errorf("LimitNOFILE=%s: want at least --max-conns (%d) plus a few hundred (docs/operations.md, Connection limits)", one("LimitNOFILE"), maxConns)
	}

	dataDir := docDataDir(t)
	if !slices.Contains(values(us, "Service", "ReadWritePaths"), dataDir) {
		t.Errorf("ReadWritePaths %q lacks the data directory %s", values(us, "Service", "ReadWritePaths"), dataDir)
	}
	if sd := one("StateDirectory"); "/var/lib/"+sd != dataDir {
		t.Errorf("StateDirectory=%s is not the data directory %s", sd, dataDir)
	}
}

// unitCopy writes the unit into a new directory with ExecStart's binary
// replaced by bin (systemd-analyze verify requires it to exist) and edit
// applied, and returns its path.
func unitCopy(t *testing.T, bin string, edit func(string) string) string {
	t.Helper()
	data, err := os.ReadFile(unitFile)
	if err != nil {
		t.Fatal(err)
	}
	s := strings.Replace(string(data), "ExecStart="+unitBinary+" ", "ExecStart="+bin+" ", 1)
	if edit != nil {
		s = edit(s)
	}
	path := filepath.Join(t.TempDir(), filepath.Base(unitFile))
	if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// verify runs systemd-analyze verify on a unit and returns its complaints:
// its output (it exits 0 on unknown keys and unparsable values, which it
// only logs) and its error.
func verify(t *testing.T, sa, unit string) string {
	t.Helper()
	cmd := exec.Command(sa, "verify", "--man=no", unit)
	cmd.Env = append(os.Environ(), "SYSTEMD_LOG_COLOR=0")
	out, err := cmd.CombinedOutput()
	msg := strings.TrimSpace(string(out))
	if err != nil {
		msg += " (" + err.Error() + ")"
	}
	return strings.TrimSpace(msg)
}

// TestSystemdAnalyzeVerify: systemd-analyze verify accepts the unit
// without a complaint (every key known, every value parsed, the binary
// executable), and does complain about a broken copy; systemd-analyze
// security rates its exposure at most 2.0 ("OK").
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa := testenv.RequireBinary(t, "systemd-analyze", "systemd")
	bin, err := os.Executable() // any executable: verify checks ExecStart's exists
	if err != nil {
		t.Fatal(err)
	}
	if msg := verify(t, sa, unitCopy(t, bin, nil)); msg != "" {
		t.Errorf("systemd-analyze verify %s:\n%s", unitFile, msg)
	}
	for name, edit := range map[string]func(string) string{
		"bad value":   func(s string) string { return strings.Replace(s, "ProtectSystem=strict", "ProtectSystem=strictest", 1) },
		"unknown key": func(s string) string { return strings.Replace(s, "RestartSec=", "RestartSecs=", 1) },
		"no binary": func(s string) string {
			return strings.Replace(s, "ExecStart="+bin, "ExecStart=/nonexistent/lockgate", 1)
		},
	} {
		if msg := verify(t, sa, unitCopy(t, bin, edit)); msg == "" {
			t.Errorf("systemd-analyze verify accepts a unit with a %s: the check is blind", name)
		}
	}
	out, err := exec.Command(sa, "security", "--offline=yes", "--threshold=20", unitCopy(t, bin, nil)).CombinedOutput()
	if err != nil {
		t.Errorf("systemd-analyze security: exposure above 2.0 (%v):\n%s", err, out)
	}
}

// syscallGroups expands systemd's system call groups
// (systemd-analyze syscall-filter) into sets of system calls.
func syscallGroups(t *testing.T, sa string) map[string]map[string]bool {
	t.Helper()
	out, err := exec.Command(sa, "syscall-filter").Output()
	if err != nil {
		t.Fatalf("systemd-analyze syscall-filter: %v", err)
	}
	raw := map[string][]string{}
	cur := ""
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		l := sc.Text()
		switch f := strings.TrimSpace(l); {
		case strings.HasPrefix(l, "@"):
			cur = f
		case cur != "" && f != "" && !strings.HasPrefix(f, "#"):
			raw[cur] = append(raw[cur], f)
		}
	}
	var expand func(string) map[string]bool
	expand = func(g string) map[string]bool {
		set := map[string]bool{}
		for _, x := range raw[g] {
			if strings.HasPrefix(x, "@") {
				for c := range expand(x) {
					set[c] = true
				}
			} else {
				set[x] = true
			}
		}
		return set
	}
	groups := map[string]map[string]bool{}
	for g := range raw {
		groups[g] = expand(g)
	}
	if len(groups["@system-service"]) < 100 {
		t.Fatalf("systemd-analyze syscall-filter: @system-service has %d calls: the parse is broken", len(groups["@system-service"]))
	}
	return groups
}

// syscallFilter evaluates the unit's SystemCallFilter lines as systemd
// does: the first, an allow list; each "~" line removes from it.
func syscallFilter(t *testing.T, groups map[string]map[string]bool, lines []string) func(string) bool {
	t.Helper()
	names := func(list string) map[string]bool {
		set := map[string]bool{}
		for _, f := range strings.Fields(list) {
			if strings.HasPrefix(f, "@") {
				if groups[f] == nil {
					t.Fatalf("SystemCallFilter: unknown group %s", f)
				}
				for c := range groups[f] {
					set[c] = true
				}
			} else {
				set[f] = true
			}
		}
		return set
	}
	if len(lines) == 0 || strings.HasPrefix(lines[0], "~") {
		t.Fatalf("SystemCallFilter %q: want an allow list first", lines)
	}
	allowed := names(lines[0])
	for _, l := range lines[1:] {
		deny, ok := strings.CutPrefix(l, "~")
		if !ok {
			for c := range names(l) {
				allowed[c] = true
			}
			continue
		}
		for c := range names(deny) {
			delete(allowed, c)
		}
	}
	return func(call string) bool { return allowed[call] }
}
