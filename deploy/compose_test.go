package deploy

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"

	"github.com/lockgate/lockgate/gateway"
	lgcli "github.com/lockgate/lockgate/internal/cli"
)

// composeFile is the stack, at the repository root so that a plain
// `docker compose up` finds it.
const composeFile = "../docker-compose.yml"

// loadCompose loads and validates the compose file as docker compose would
// (schema, interpolation, normalisation, consistency), with an empty
// environment so that the file's own defaults are what is tested.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{composeFile},
		cli.WithWorkingDirectory(filepath.Dir(composeFile)),
		cli.WithEnv([]string{}),
		cli.WithInterpolation(true),
		cli.WithNormalization(true),
		cli.WithConsistency(true),
	)
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("%s does not load: %v", composeFile, err)
	}
	return p
}

// isLockgate reports whether a service runs the lockgate image.
func isLockgate(s types.ServiceConfig) bool {
	return s.Build != nil || strings.HasPrefix(s.Image, "lockgate")
}

// flagValue returns the value of --name in a command line ("--name v" or
// "--name=v") and whether it is there.
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

// env returns a service's environment as plain strings.
func env(s types.ServiceConfig) map[string]string {
	m := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			m[k] = *v
		}
	}
	return m
}

// setting is a lockgate setting of a service: its flag, else its
// LOCKGATE_ environment variable (the CLI's precedence).
func setting(s types.ServiceConfig, name string) (string, bool) {
	if v, ok := flagValue(s.Command, name); ok {
		return v, true
	}
	v, ok := env(s)[lgcli.EnvName(name)]
	return v, ok
}

// roles groups the services by what they run.
func roles(p *types.Project) map[string][]string {
	r := map[string][]string{}
	for name, s := range p.Services {
		role := "other"
		switch {
		case isLockgate(s) && len(s.Command) > 0 && s.Command[0] == "node":
			role = "raft"
		case isLockgate(s) && len(s.Command) > 0 && s.Command[0] == "serve":
			b, _ := setting(s, "backend")
			role = "gateway-" + b
		case isLockgate(s) && len(s.Command) > 0 && s.Command[0] == "store":
			role = "fencedstore"
		case strings.HasPrefix(s.Image, "redis:"):
			role = "redis"
		case strings.HasPrefix(s.Image, "postgres:"):
			role = "postgres"
		case strings.Contains(s.Image, "etcd:"):
			role = "etcd"
		}
		r[role] = append(r[role], name)
	}
	for _, names := range r {
		slices.Sort(names)
	}
	return r
}

func TestComposeServices(t *testing.T) {
	p := loadCompose(t)
	got := roles(p)
	want := map[string][]string{
		"raft":             {"raft1", "raft2", "raft3"},
		"redis":            {"redis1", "redis2", "redis3", "redis4", "redis5"},
		"postgres":         {"postgres"},
		"etcd":             {"etcd1", "etcd2", "etcd3"},
		"gateway-redlock":  {"gw-redlock"},
		"gateway-postgres": {"gw-postgres"},
		"gateway-etcd":     {"gw-etcd"},
		"fencedstore":      {"fencedstore"},
	}
	for role, names := range want {
		if !slices.Equal(got[role], names) {
			t.Errorf("%s services: %v, want %v", role, got[role], names)
		}
	}
	if len(got["other"]) > 0 {
		t.Errorf("services of no known role: %v", got["other"])
	}
}

// TestComposeHealthChecks: every service has a health check, and those that
// run lockgate use `lockgate healthcheck` against the port they listen on.
func TestComposeHealthChecks(t *testing.T) {
	p := loadCompose(t)
	for name, s := range p.Services {
		hc := s.HealthCheck
		if hc == nil || hc.Disable || len(hc.Test) < 2 || hc.Test[0] == "NONE" {
			t.Errorf("%s: no health check", name)
			continue
		}
		if hc.Interval == nil || hc.Timeout == nil || hc.Retries == nil {
			t.Errorf("%s: health check without interval, timeout and retries", name)
		}
		if !isLockgate(s) {
			continue
		}
		test := hc.Test
		if test[0] != "CMD" || len(test) < 3 || test[1] != "/lockgate" {
			t.Errorf("%s: health check %q: want [CMD /lockgate healthcheck ...] (the image has no shell)", name, test)
			continue
		}
		if err := lgcli.CheckArgs(test[2:], nil); err != nil {
			t.Errorf("%s: health check %q does not parse: %v", name, test, err)
		}
		u, _ := flagValue(test, "url")
		hu, err := url.Parse(u)
		if err != nil || hu.Hostname() != "127.0.0.1" || hu.Path != "/healthz" {
			t.Errorf("%s: health check URL %q: want http://127.0.0.1:PORT/healthz", name, u)
			continue
		}
		listen, _ := setting(s, "listen") // serve, store
		if l, ok := setting(s, "api-listen"); ok {
			listen = l // node
		}
		if _, port, _ := net.SplitHostPort(listen); port != hu.Port() {
			t.Errorf("%s: health check probes port %s, the service listens on %q", name, hu.Port(), listen)
		}
	}
}

// TestComposeCommandsParse runs every lockgate command line of the file,
// with the service's environment, through the real CLI's parser.
func TestComposeCommandsParse(t *testing.T) {
	p := loadCompose(t)
	n := 0
	for name, s := range p.Services {
		if !isLockgate(s) {
			continue
		}
		n++
		if len(s.Command) == 0 {
			t.Errorf("%s: no command (the image's default would run instead)", name)
			continue
		}
		if err := lgcli.CheckArgs(s.Command, env(s)); err != nil {
			t.Errorf("%s: lockgate %s: %v", name, strings.Join(s.Command, " "), err)
		}
	}
	if n != 3+3+1 {
		t.Errorf("%d lockgate services, want 7 (3 nodes, 3 gateways, the store)", n)
	}
	// The check itself must catch a broken command line.
	if err := lgcli.CheckArgs([]string{"node", "--id", "1", "--data-dir", "/data", "--bootstrapp"}, nil); err == nil {
		t.Error("CheckArgs accepted an unknown flag")
	}
}

// TestComposeRaftCluster: three nodes with ids 1..3, on the default ports
// (Raft 8080+id, API 50050+id), Raft bound to every interface and
// advertised by service name, one bootstrap, the others joining through
// members.
func TestComposeRaftCluster(t *testing.T) {
	p := loadCompose(t)
	apiAddrs := map[string]string{} // service → api-addr
	for _, name := range []string{"raft1", "raft2", "raft3"} {
		apiAddrs[name], _ = flagValue(p.Services[name].Command, "api-addr")
	}
	bootstraps := 0
	for i, name := range []string{"raft1", "raft2", "raft3"} {
		s := p.Services[name]
		id := strconv.Itoa(i + 1)
		if v, _ := flagValue(s.Command, "id"); v != id {
			t.Errorf("%s: --id %q, want %s", name, v, id)
		}
		raftAddr, _ := flagValue(s.Command, "raft-addr")
		if want := fmt.Sprintf("0.0.0.0:%d", 8080+i+1); raftAddr != want {
			t.Errorf("%s: --raft-addr %q, want %q", name, raftAddr, want)
		}
		// Peers dial the service name, which survives a new container IP.
		if adv, _ := flagValue(s.Command, "raft-advertise"); adv != fmt.Sprintf("%s:%d", name, 8080+i+1) {
			t.Errorf("%s: --raft-advertise %q, want %s:%d", name, adv, name, 8080+i+1)
		}
		wantAPI := fmt.Sprintf("%s:%d", name, 50050+i+1)
		if apiAddrs[name] != wantAPI {
			t.Errorf("%s: --api-addr %q, want %q", name, apiAddrs[name], wantAPI)
		}
		if slices.Contains(s.Command, "--bootstrap") {
			bootstraps++
			continue
		}
		join, _ := flagValue(s.Command, "join")
		for _, seed := range strings.Split(join, ",") {
			if seed == apiAddrs[name] || !slices.Contains([]string{apiAddrs["raft1"], apiAddrs["raft2"], apiAddrs["raft3"]}, seed) {
				t.Errorf("%s: --join %q: each seed must be another member's API address", name, seed)
			}
		}
		if d, ok := s.DependsOn["raft1"]; !ok || d.Condition != types.ServiceConditionHealthy {
			t.Errorf("%s: does not wait for the bootstrap node to be healthy", name)
		}
	}
	if bootstraps != 1 {
		t.Errorf("%d nodes bootstrap, want exactly 1", bootstraps)
	}
}

// TestComposeRaftSecurity: the nodes bind every interface, so each needs
// peer authentication or the explicit insecure flag (the node refuses to
// start otherwise), and an admin tokens file, mounted from a config whose
// content is a valid tokens file, for the joins to be allowed.
func TestComposeRaftSecurity(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"raft1", "raft2", "raft3"} {
		s := p.Services[name]
		_, tls := flagValue(s.Command, "tls-cert")
		if !tls && !slices.Contains(s.Command, "--insecure-raft-no-peer-auth") {
			t.Errorf("%s: binds 0.0.0.0 without --tls-cert or --insecure-raft-no-peer-auth: it would refuse to start", name)
		}
		file, ok := flagValue(s.Command, "admin-tokens-file")
		if !ok {
			t.Errorf("%s: no --admin-tokens-file: joins would be refused (403)", name)
			continue
		}
		i := slices.IndexFunc(s.Configs, func(c types.ServiceConfigObjConfig) bool { return c.Target == file })
		if i < 0 {
			t.Errorf("%s: --admin-tokens-file %s is not a mounted config", name, file)
			continue
		}
		cfg, ok := p.Configs[s.Configs[i].Source]
		if !ok {
			t.Errorf("%s: config %q is not defined", name, s.Configs[i].Source)
			continue
		}
		toks, err := gateway.ParseTokens(strings.NewReader(cfg.Content))
		if err != nil || len(toks) == 0 {
			t.Errorf("%s: config %s is not a tokens file: %v (%q)", name, s.Configs[i].Source, err, cfg.Content)
		}
	}
}

// TestComposeGateways: each gateway names the servers of its backend and
// waits for them to be healthy.
func TestComposeGateways(t *testing.T) {
	p := loadCompose(t)
	r := roles(p)
	hosts := func(list string, withScheme bool) []string {
		var out []string
		for _, a := range strings.Split(list, ",") {
			if withScheme {
				u, err := url.Parse(a)
				if err != nil {
					t.Errorf("bad URL %q", a)
					continue
				}
				a = u.Host
			}
			h, _, err := net.SplitHostPort(a)
			if err != nil {
				t.Errorf("bad address %q", a)
			}
			out = append(out, h)
		}
		slices.Sort(out)
		return out
	}
	check := func(gw, setting_ string, withScheme bool, servers []string) {
		t.Helper()
		s := p.Services[gw]
		v, ok := setting(s, setting_)
		if !ok {
			t.Errorf("%s: no --%s", gw, setting_)
			return
		}
		if got := hosts(v, withScheme); !slices.Equal(got, servers) {
			t.Errorf("%s: --%s names %v, want the services %v", gw, setting_, got, servers)
		}
		for _, dep := range servers {
			if d, ok := s.DependsOn[dep]; !ok || d.Condition != types.ServiceConditionHealthy {
				t.Errorf("%s: does not wait for %s to be healthy", gw, dep)
			}
		}
	}
	check("gw-redlock", "redis-addrs", false, r["redis"])
	check("gw-etcd", "etcd-endpoints", true, r["etcd"])
	check("gw-postgres", "postgres-url", true, r["postgres"])
	// A password belongs in the environment, not on the command line.
	if _, ok := flagValue(p.Services["gw-postgres"].Command, "postgres-url"); ok {
		t.Error("gw-postgres: --postgres-url on the command line shows its password to ps; use LOCKGATE_POSTGRES_URL")
	}
}

// TestComposePorts: published host ports are distinct and each targets the
// port the service listens on.
func TestComposePorts(t *testing.T) {
	p := loadCompose(t)
	want := map[string]string{ // service → published host port
		"raft1": "50051", "raft2": "50052", "raft3": "50053",
		"gw-redlock": "50060", "gw-postgres": "50061", "gw-etcd": "50062",
		"fencedstore": "8000",
	}
	seen := map[string]string{}
	for name, s := range p.Services {
		for _, port := range s.Ports {
			if other, dup := seen[port.Published]; dup {
				t.Errorf("host port %s published by %s and %s", port.Published, other, name)
			}
			seen[port.Published] = name
		}
		w, ok := want[name]
		if !ok {
			continue
		}
		if len(s.Ports) != 1 || s.Ports[0].Published != w {
			t.Errorf("%s: ports %+v, want host port %s", name, s.Ports, w)
			continue
		}
		listen, _ := setting(s, "listen")
		if l, ok := setting(s, "api-listen"); ok {
			listen = l
		}
		host, port, err := net.SplitHostPort(listen)
		if err != nil || host != "0.0.0.0" || port != strconv.Itoa(int(s.Ports[0].Target)) {
			t.Errorf("%s: publishes container port %d but listens on %q (want 0.0.0.0:%d)", name, s.Ports[0].Target, listen, s.Ports[0].Target)
		}
	}
	// Raft nodes publish their API port one to one, so that the API
	// addresses followers redirect to (raft1:50051 …) work from the host
	// with raft1..raft3 mapped to 127.0.0.1.
	for _, name := range []string{"raft1", "raft2", "raft3"} {
		s := p.Services[name]
		if len(s.Ports) == 1 && s.Ports[0].Published != strconv.Itoa(int(s.Ports[0].Target)) {
			t.Errorf("%s: publishes %d as %s; want the same port", name, s.Ports[0].Target, s.Ports[0].Published)
		}
	}
}

// TestComposeVolumes: state lives in named volumes (never bind mounts or
// the container's layer), one per stateful service, and lockgate's data
// paths are inside them.
func TestComposeVolumes(t *testing.T) {
	p := loadCompose(t)
	stateless := map[string]bool{}
	for role, names := range roles(p) {
		for _, n := range names {
			// A gateway over an external backend keeps no state.
			stateless[n] = strings.HasPrefix(role, "gateway-")
		}
	}
	used := map[string]string{}
	for name, s := range p.Services {
		if len(s.Volumes) == 0 && !stateless[name] {
			t.Errorf("%s: no volume: its state would die with the container", name)
		}
		for _, v := range s.Volumes {
			if v.Type != types.VolumeTypeVolume {
				t.Errorf("%s: %s mount %s: want a named volume", name, v.Type, v.Target)
				continue
			}
			if _, ok := p.Volumes[v.Source]; !ok {
				t.Errorf("%s: volume %q is not declared", name, v.Source)
			}
			if other, dup := used[v.Source]; dup {
				t.Errorf("volume %q shared by %s and %s", v.Source, other, name)
			}
			used[v.Source] = name
		}
		if !isLockgate(s) {
			continue
		}
		path, ok := setting(s, "data-dir") // node
		if !ok {
			path, ok = setting(s, "data") // store
		}
		if !ok {
			continue
		}
		inside := false
		for _, v := range s.Volumes {
			if path == v.Target || strings.HasPrefix(path, strings.TrimSuffix(v.Target, "/")+"/") {
				inside = true
			}
		}
		if !inside {
			t.Errorf("%s: data path %q is not on a volume", name, path)
		}
	}
	for v := range p.Volumes {
		if _, ok := used[v]; !ok {
			t.Errorf("volume %q declared but unused", v)
		}
	}
}
