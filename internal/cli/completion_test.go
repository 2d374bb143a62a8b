package cli

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestCompletion(t *testing.T) {
	for _, shell := range []string{"bash", "zsh", "fish"} {
		code, out, errOut := run(t, "completion", shell)
		if code != 0 || len(out) < 100 || !strings.Contains(out, "lockgate") {
			t.Errorf("completion %s: exit %d, %d bytes, stderr %q", shell, code, len(out), errOut)
		}
	}
	// The generated script completes subcommands through the binary's
	// hidden __complete command; check that it answers.
	code, out, _ := run(t, "__complete", "con")
	if code != 0 || !strings.Contains(out, "config") {
		t.Errorf("__complete con: exit %d, %q", code, out)
	}
}

func TestHealthcheck(t *testing.T) {
	status := http.StatusOK
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	if code, out, errOut := run(t, "healthcheck", "--url", srv.URL+"/healthz"); code != 0 || !strings.Contains(out, "healthy") {
		t.Errorf("healthy server: exit %d, %q %q", code, out, errOut)
	}
	status = http.StatusServiceUnavailable
	if code, _, errOut := run(t, "healthcheck", "--url", srv.URL+"/healthz"); code != 1 || !strings.Contains(errOut, "503") {
		t.Errorf("503: exit %d, %q", code, errOut)
	}
	srv.Close()
	if code, _, errOut := run(t, "healthcheck", "--url", srv.URL+"/healthz", "--timeout", "500ms"); code != 1 || !strings.Contains(errOut, "unhealthy") {
		t.Errorf("no server: exit %d, %q", code, errOut)
	}

	// TLS: trusted through --tls-ca, refused without it.
	tlsSrv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer tlsSrv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	pemBytes := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	if err := os.WriteFile(ca, pemBytes, 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, errOut := run(t, "healthcheck", "--url", tlsSrv.URL+"/healthz", "--tls-ca", ca); code != 0 {
		t.Errorf("TLS with --tls-ca: exit %d, %q", code, errOut)
	}
	if code, _, errOut := run(t, "healthcheck", "--url", tlsSrv.URL+"/healthz"); code != 1 || !strings.Contains(errOut, "certificate") {
		t.Errorf("TLS without --tls-ca: exit %d, %q", code, errOut)
	}
}

func TestCheckArgs(t *testing.T) {
	for _, args := range [][]string{
		{"node", "--id", "1", "--data-dir", "/data", "--bootstrap"},
		{"serve", "--backend", "redlock", "--redis-addrs", "a:1,b:2"},
		{"healthcheck"},
		{"lock", "acquire", "k"},
	} {
		if err := CheckArgs(args, nil); err != nil {
			t.Errorf("CheckArgs(%q) = %v", args, err)
		}
	}
	for args, want := range map[string]string{
		"node --id 1":                       `required flag(s) "data-dir" not set`,
		"node --id 1 --data-dir /d --nodez": "unknown flag: --nodez",
		"serve --nodes many":                `invalid argument "many"`,
		"frobnicate":                        `unknown command "frobnicate"`,
		"lock":                              "not a runnable command",
		"version extra":                     "unknown command",
	} {
		err := CheckArgs(strings.Fields(args), nil)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckArgs(%q) = %v, want an error mentioning %q", args, err, want)
		}
	}
	// The environment counts, like a flag would.
	env := map[string]string{"LOCKGATE_DATA_DIR": "/data", "LOCKGATE_LOG_LEVEL": "debug"}
	if err := CheckArgs([]string{"node", "--id", "1"}, env); err != nil {
		t.Errorf("node with LOCKGATE_DATA_DIR: %v", err)
	}
	for _, tc := range []struct {
		env  map[string]string
		want string
	}{
		{map[string]string{"LOCKGATE_NODES": "x"}, `environment LOCKGATE_NODES="x": got "x", want an integer`},
		{map[string]string{"LOCKGATE_REDIS_ADDRS": "a:1"}, "LOCKGATE_REDIS_ADDRS is not one of its settings"},
	} {
		err := CheckArgs([]string{"cluster", "--data-dir", "/d"}, tc.env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("CheckArgs(cluster, %v) = %v, want %q", tc.env, err, tc.want)
		}
	}
}

// TestCheckArgsConfigFile: a --config names a file inside the container
// or pod, which CheckArgs does not read, even when it exists here with
// settings of other commands; required flags may come from it.
func TestCheckArgsConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lockgate.yaml")
	if err := os.WriteFile(path, []byte("data-dir: /data\nno-such-setting: 1\nbackend: redlock\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{
		{"--config", path, "node", "--id", "1"},
		{"node", "--config=" + path, "--id", "1"},
	} {
		if err := CheckArgs(args, nil); err != nil {
			t.Errorf("CheckArgs(%q) = %v", args, err)
		}
	}
	if err := CheckArgs([]string{"--config", path, "node", "--id", "1", "--nodez"}, nil); err == nil || !strings.Contains(err.Error(), "unknown flag: --nodez") {
		t.Errorf("an unknown flag beside --config: %v", err)
	}
}
