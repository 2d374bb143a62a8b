package cli

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// printConfig runs `config print --json` with args and returns the settings
// by name.
func printConfig(t *testing.T, args ...string) map[string]settingView {
	t.Helper()
	code, out, errOut := run(t, args...)
	if code != 0 {
		t.Fatalf("%v: exit %d: %s", args, code, errOut)
	}
	var views []settingView
	if err := json.Unmarshal([]byte(out), &views); err != nil {
		t.Fatalf("%v: %v in %q", args, err, out)
	}
	m := map[string]settingView{}
	for _, v := range views {
		m[v.Name] = v
	}
	return m
}

func TestEnvName(t *testing.T) {
	for flag, want := range map[string]string{
		"data-dir": "LOCKGATE_DATA_DIR", "redis-addrs": "LOCKGATE_REDIS_ADDRS", "tls-key": "LOCKGATE_TLS_KEY", "id": "LOCKGATE_ID",
	} {
		if got := EnvName(flag); got != want {
			t.Errorf("EnvName(%q) = %q, want %q", flag, got, want)
		}
	}
}

// TestConfigPrecedence: flag > environment > file > default, each setting
// resolved on its own, as config print reports it.
func TestConfigPrecedence(t *testing.T) {
	p := writeConfig(t, `listen: 10.0.0.1:1
nodes: 5
backend: redlock
redis-addrs:
  - r1:6379
  - r2:6379
log-level: warn
`)
	t.Setenv("LOCKGATE_LISTEN", "10.0.0.2:2")
	t.Setenv("LOCKGATE_NODES", "7")
	t.Setenv("LOCKGATE_ETCD_ENDPOINTS", "http://e1:2379,http://e2:2379")
	got := printConfig(t, "--config", p, "config", "print", "--json", "--for", "serve", "--", "--listen", "10.0.0.3:3")
	for name, want := range map[string]settingView{
		"listen":         {Value: "10.0.0.3:3", Source: SourceFlag},                // flag beats env and file
		"nodes":          {Value: "7", Source: SourceEnv, Where: "LOCKGATE_NODES"}, // env beats file
		"etcd-endpoints": {Value: "http://e1:2379,http://e2:2379", Source: SourceEnv, Where: "LOCKGATE_ETCD_ENDPOINTS"},
		"backend":        {Value: "redlock", Source: SourceFile, Where: p + ":3"}, // file beats default
		"redis-addrs":    {Value: "r1:6379,r2:6379", Source: SourceFile, Where: p + ":4"},
		"log-level":      {Value: "warn", Source: SourceFile, Where: p + ":7"}, // a shared setting
		"config":         {Value: p, Source: SourceFlag},
		"data-dir":       {Value: "", Source: SourceDefault},
	} {
		g := got[name]
		if g.Value != want.Value || g.Source != want.Source || g.Where != want.Where {
			t.Errorf("%s = %+v, want %+v", name, g, want)
		}
	}
	// The file itself may be named in the environment.
	t.Setenv("LOCKGATE_CONFIG", p)
	got = printConfig(t, "config", "print", "--json", "--for", "serve")
	if g := got["config"]; g.Source != SourceEnv || g.Value != p {
		t.Errorf("config from LOCKGATE_CONFIG: %+v", g)
	}
	if g := got["backend"]; g.Source != SourceFile || g.Value != "redlock" {
		t.Errorf("backend from the file named by LOCKGATE_CONFIG: %+v", g)
	}
}

// TestConfigPrecedenceRunning checks the four layers on a command that
// runs: healthcheck probes the --url it resolved.
func TestConfigPrecedenceRunning(t *testing.T) {
	var hits [4]atomic.Int32
	urls := make([]string, 4)
	for i := range urls {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits[i].Add(1) }))
		t.Cleanup(srv.Close)
		urls[i] = srv.URL + "/healthz"
	}
	const fileURL, envURL, flagURL = 1, 2, 3
	p := writeConfig(t, "url: "+urls[fileURL]+"\n")
	steps := []struct {
		args []string
		env  string
		want int
	}{
		{[]string{"healthcheck"}, "", -1}, // default: 127.0.0.1:50050, nothing listens in the test
		{[]string{"--config", p, "healthcheck"}, "", fileURL},
		{[]string{"--config", p, "healthcheck"}, urls[envURL], envURL},
		{[]string{"--config", p, "healthcheck", "--url", urls[flagURL]}, urls[envURL], flagURL},
	}
	for _, s := range steps {
		t.Setenv("LOCKGATE_URL", s.env) // restored at the end of the test
		if s.env == "" {
			os.Unsetenv("LOCKGATE_URL")
		}
		before := [4]int32{}
		for i := range hits {
			before[i] = hits[i].Load()
		}
		code, _, errOut := run(t, append(s.args, "--timeout", "1s")...)
		if s.want < 0 {
			if code == 0 {
				t.Errorf("%v: exit 0 with nothing listening on the default URL", s.args)
			}
			continue
		}
		if code != 0 {
			t.Errorf("%v (LOCKGATE_URL=%q): exit %d: %s", s.args, s.env, code, errOut)
		}
		for i := range hits {
			if d := hits[i].Load() - before[i]; (i == s.want) != (d == 1) {
				t.Errorf("%v (LOCKGATE_URL=%q): server %d got %d probes, want the probe on server %d", s.args, s.env, i, d, s.want)
			}
		}
	}
}

func TestConfigMasking(t *testing.T) {
	for _, tc := range []struct{ name, value, want string }{
		{"postgres-url", "postgres://bob:hunter2@db:5432/locks?sslmode=disable", "postgres://bob:****@db:5432/locks?sslmode=disable"},
		{"postgres-url", "postgres://bob@db/locks", "postgres://bob@db/locks"},
		{"postgres-url", "host=db user=bob password=hunter2 dbname=locks", "host=db user=bob password=**** dbname=locks"},
		{"redis-addrs", "redis://:s3cret@r1:6379", "redis://:****@r1:6379"},
		{"etcd-endpoints", "http://e1:2379", "http://e1:2379"},
		{"auth-tokens-file", "/etc/lockgate/tokens", Mask},
		{"token-file", "/run/secrets/token", Mask},
		{"db-password", "hunter2", Mask},
		{"client-secret", "x", Mask},
		{"token", "", ""}, // nothing to hide
		{"listen", "0.0.0.0:50050", "0.0.0.0:50050"},
	} {
		if got := maskValue(tc.name, tc.value); got != tc.want {
			t.Errorf("maskValue(%q, %q) = %q, want %q", tc.name, tc.value, got, tc.want)
		}
	}

	// End to end: config print never shows the password, in any layer.
	t.Setenv("LOCKGATE_POSTGRES_URL", "postgres://lockgate:hunter2@postgres:5432/lockgate")
	code, out, errOut := run(t, "config", "print", "--for", "serve")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if strings.Contains(out, "hunter2") || !strings.Contains(out, "postgres://lockgate:****@postgres:5432/lockgate") {
		t.Errorf("config print does not mask the password:\n%s", out)
	}
	// Nor does an error message about a secret setting's value.
	if got := quoteMasked("db-password", "hunter2"); got != `"****"` {
		t.Errorf("quoteMasked of a secret = %s", got)
	}
	// A wrong value in the environment names the variable.
	p := writeConfig(t, "nodes: 3\n")
	t.Setenv("LOCKGATE_NODES", "hunter2")
	code, _, errOut = run(t, "--config", p, "config", "print", "--for", "serve")
	if code == 0 || !strings.Contains(errOut, `LOCKGATE_NODES="hunter2": got "hunter2", want an integer`) {
		t.Errorf("wrong env type: exit %d, %q", code, errOut)
	}
}

func TestConfigErrors(t *testing.T) {
	for _, tc := range []struct{ body, want string }{
		// An unknown setting, with the closest known one.
		{"log-level: info\n\nnodez: 3\n", `lockgate.yaml:3: unknown setting "nodez" (did you mean "nodes"?)`},
		{"redis-adrs: [a:1]\n", `lockgate.yaml:1: unknown setting "redis-adrs" (did you mean "redis-addrs"?)`},
		{"frobnicate: 1\n", `lockgate.yaml:1: unknown setting "frobnicate"` + "\n"},
		// The wrong type, for this command's and another command's settings.
		{"log-level: info\nnodes: three\n", `lockgate.yaml:2: setting "nodes": got "three", want an integer`},
		{"ttl: soon\n", `lockgate.yaml:1: setting "ttl": got "soon", want a duration`},
		{"bootstrap: maybe\n", `lockgate.yaml:1: setting "bootstrap": got "maybe", want a boolean`},
		{"data-dir: [a, b]\n", `lockgate.yaml:1: setting "data-dir": got a list, want a string`},
		{"redis-addrs: {a: b}\n", `lockgate.yaml:1: setting "redis-addrs": got a mapping, want a list of strings`},
		{"redis-addrs:\n  - a:1\n  - [b]\n", `lockgate.yaml:3: setting "redis-addrs": list items must be plain values`},
		// Given twice, or a setting that cannot be in a file.
		{"nodes: 3\nnodes: 4\n", `lockgate.yaml:2: setting "nodes" given twice (first on line 1)`},
		{"config: other.yaml\n", `lockgate.yaml:1: "config" cannot be set in the config file`},
	} {
		code, _, errOut := run(t, "--config", writeConfig(t, tc.body), "version")
		if code == 0 || !strings.Contains(errOut+"\n", tc.want) {
			t.Errorf("config %q: exit %d, stderr %q, want it to mention %q", tc.body, code, errOut, tc.want)
		}
	}
	// Settings of the right type for the commands that take them (the
	// bench's --backend, a list beside chaos's string, is tested in
	// internal/benchcli).
	ok := writeConfig(t, "backend: raft\nraft-dial: {a: b}\nnodes:\n")
	if code, _, errOut := run(t, "--config", ok, "version"); code != 0 {
		t.Errorf("valid file: exit %d: %s", code, errOut)
	}
}

func TestUnknownEnvWarns(t *testing.T) {
	t.Setenv("LOCKGATE_DATA_DIRR", "/x")
	t.Setenv("LOCKGATE_FENCING_TOKEN", "7") // set by lockgate run for its child: not a setting
	code, _, errOut := run(t, "version")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	if !strings.Contains(errOut, "LOCKGATE_DATA_DIRR matches no setting (did you mean LOCKGATE_DATA_DIR?)") {
		t.Errorf("no warning for a misspelt variable: %q", errOut)
	}
	if strings.Contains(errOut, "FENCING_TOKEN") {
		t.Errorf("warned about lockgate run's own variable: %q", errOut)
	}
	// Nor does it fill lock release --fencing-token: under lockgate run it
	// is the parent's lease, not the one being released.
	got := printConfig(t, "config", "print", "--json", "--for", "lock release")
	if g := got["fencing-token"]; g.Source != SourceDefault {
		t.Errorf("LOCKGATE_FENCING_TOKEN filled --fencing-token: %+v", g)
	}
}

func TestConfigPrintTable(t *testing.T) {
	code, out, errOut := run(t, "config", "print", "--for", "serve")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"# lockgate serve: effective configuration", "SETTING", "nodes", "3", "default"} {
		if !strings.Contains(out, want) {
			t.Errorf("config print does not show %q:\n%s", want, out)
		}
	}
	if code, _, errOut := run(t, "config", "print", "--for", "nosuch"); code == 0 || !strings.Contains(errOut, `--for "nosuch": no such command`) {
		t.Errorf("--for nosuch: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run(t, "config", "print", "--for", "serve", "--", "--nodez", "3"); code == 0 || !strings.Contains(errOut, "unknown flag: --nodez") {
		t.Errorf("bad flag after --: exit %d, %q", code, errOut)
	}
}
