package clients_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/servers"
	"github.com/lockgate/lockgate/internal/testenv"
)

// runnerTimeout bounds one foreign runner (install, build and test). A
// healthy run takes under a minute; at 5 min two hung runners would eat 10
// of make test's 14.
const runnerTimeout = 3 * time.Minute

// leaderWait bounds the wait for a leader that every running node knows.
const leaderWait = 30 * time.Second

// TestClients runs the scenarios of clients/scenarios (one NAME.json
// each, steps the runners interpret) with every client — the Go SDK, the
// TypeScript client and the Python client — against one three-node
// `lockgate node` cluster, whose leader the runners kill and restore
// through the control API. Then it adds scenarios to a copy of the
// directory and checks that every runner runs them, passing the right one
// and failing the wrong one (addedScenarios).
func TestClients(t *testing.T) {
	if testing.Short() {
		t.Skip("the client conformance harness starts a cluster and runs three clients' tests")
	}
	bin := testenv.BuildLockgate(t)
	rl := testenv.StartRaftlockWith(t, bin, 3, testenv.RaftlockOptions{DataDir: memDataDir(t)})
	h := newHarness(t, rl)
	scenariosDir, err := filepath.Abs("scenarios")
	if err != nil {
		t.Fatal(err)
	}
	set := loadScenarios(t, scenariosDir)

	t.Run("go", func(t *testing.T) {
		h.restoreT(t)
		runGo(t, h, set)
	})
	jsRoot, work := t.TempDir(), ""
	t.Run("typescript", func(t *testing.T) {
		dir := filepath.Join("js")
		if !exists(filepath.Join(dir, "package.json")) {
			skipOrFail(t, "clients/js/package.json does not exist: no TypeScript client to run")
		}
		testenv.RequireBinary(t, "node", "nodejs")
		npm := testenv.RequireBinary(t, "npm", "npm")
		// npm ci replaces node_modules and the build writes dist/: do both
		// in a copy, so that the harness leaves the working tree alone and
		// two runs of it cannot trample each other. The copy keeps the
		// tree's layout (clients/js beside console/web), for the console's
		// check below, which compiles with this node_modules.
		work = filepath.Join(jsRoot, "clients", "js")
		if err := copySource(dir, work, "node_modules", "dist"); err != nil {
			t.Fatal(err)
		}
		h.restoreT(t)
		ctx, cancel := context.WithTimeout(context.Background(), runnerTimeout)
		defer cancel()
		env := h.env(scenariosDir)
		var out []string
		for _, args := range [][]string{{"ci", "--no-audit", "--no-fund", "--prefer-offline"}, {"run", "build"}, {"test"}} {
			var err error
			if out, err = runLogged(ctx, t, work, env, npm, args...); err != nil {
				t.Fatalf("npm %s: %v", strings.Join(args, " "), err)
			}
		}
		checkReported(t, set, out)
	})
	t.Run("console", func(t *testing.T) {
		if work == "" || !exists(filepath.Join(work, "node_modules", ".bin", "tsc")) {
			skipOrFail(t, "the typescript run did not install clients/js's TypeScript")
		}
		checkConsole(t, jsRoot, work)
	})
	python := ""
	t.Run("python", func(t *testing.T) {
		python = requirePython(t)
		h.restoreT(t)
		ctx, cancel := context.WithTimeout(context.Background(), runnerTimeout)
		defer cancel()
		env := append(h.env(scenariosDir), "PYTHONDONTWRITEBYTECODE=1") // no __pycache__ in the tree
		out, err := runLogged(ctx, t, "python", env, python, "-m", "unittest", "discover", "-s", "tests", "-v")
		if err != nil {
			t.Fatalf("python unittest: %v", err)
		}
		checkReported(t, set, out)
	})
	t.Run("added-scenario", func(t *testing.T) {
		addedScenarios(t, h, scenariosDir, work, python)
	})
}

// requirePython is the Python the harness runs the Python client with,
// or skips (fails under CI) when it or the client's dependency is missing.
func requirePython(t *testing.T) string {
	t.Helper()
	if !exists("python") {
		skipOrFail(t, "clients/python does not exist: no Python client to run")
	}
	const python = "/usr/bin/python3"
	if !exists(python) {
		skipOrFail(t, python+" not found; install the Debian package \"python3\"")
	}
	if out, err := exec.Command(python, "-c", "import websockets").CombinedOutput(); err != nil {
		skipOrFail(t, fmt.Sprintf("%s cannot import websockets (%v: %s); install the Debian package \"python3-websockets\"",
			python, err, strings.TrimSpace(string(out))))
	}
	return python
}

// The scenarios addedScenarios writes beside the others: one that holds
// (written once, in the vocabulary only), and one whose expectation is
// wrong (a try-acquire of a free key expected to be held), which every
// runner must fail.
const (
	addedName = "added-by-the-harness"
	addedJSON = `{"name": "added-by-the-harness",
 "doc": "Written by TestClients into a copy of the directory: every runner must run it without a change of code.",
 "steps": [
  {"do": "client", "as": "A"}, {"do": "client", "as": "B"},
  {"do": "acquire", "client": "A", "lease": "a", "key": "/x", "ttlMs": 10000},
  {"do": "tryAcquire", "client": "B", "lease": "b0", "key": "/x", "ttlMs": 10000, "expectError": "held", "holder": "a"},
  {"do": "acquire", "client": "B", "lease": "b", "key": "/x", "ttlMs": 10000, "async": true},
  {"do": "inspect", "client": "A", "key": "/x", "waiters": 1, "poll": true},
  {"do": "release", "lease": "a"},
  {"do": "await", "lease": "b"},
  {"do": "tokenAbove", "lease": "b", "above": "a"},
  {"do": "release", "lease": "b"},
  {"do": "inspect", "client": "B", "key": "/x", "free": true}
 ]}`
	wrongName = "wrong-expectation"
	wrongJSON = `{"name": "wrong-expectation",
 "doc": "A try-acquire of a free key expected to be held: every runner must fail it.",
 "steps": [
  {"do": "client", "as": "A"},
  {"do": "tryAcquire", "client": "A", "lease": "a", "ttlMs": 10000, "expectError": "held"}
 ]}`
)

// addedScenarios copies the scenario directory, adds addedJSON and
// wrongJSON to the copy, and runs each runner on the copy with
// LOCKGATE_ONLY naming the two: each must report "ok" for the added one
// and "FAIL" for the wrong one. work is the TypeScript client's built
// copy ("" when the typescript run did not happen), python the Python
// ("" likewise).
func addedScenarios(t *testing.T, h *harness, dir, work, python string) {
	tmp := t.TempDir()
	if err := copySource(dir, tmp); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{addedName: addedJSON, wrongName: wrongJSON} {
		if err := os.WriteFile(filepath.Join(tmp, name+".json"), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set := loadScenarios(t, tmp)
	var added, wrong scenario
	for _, s := range set.Scenarios {
		switch s.Name {
		case addedName:
			added = s
		case wrongName:
			wrong = s
		}
	}
	if added.Name == "" || wrong.Name == "" {
		t.Fatalf("the copy's scenarios lack %s or %s", addedName, wrongName)
	}
	env := append(h.env(tmp), "LOCKGATE_ONLY="+addedName+","+wrongName, "PYTHONDONTWRITEBYTECODE=1")
	// judge checks a runner's output: ok for the added scenario, FAIL for
	// the wrong one, and the runner itself failed (err).
	judge := func(t *testing.T, out []string, err error) {
		t.Helper()
		only := scenarioSet{Scenarios: []scenario{added}}
		checkReported(t, only, out)
		if !slices.ContainsFunc(out, regexp.MustCompile(`(^|[^\w-])FAIL `+wrongName+`: `).MatchString) {
			t.Errorf("the runner printed no \"FAIL %s: …\" line: a wrong expectation passed, or was not run", wrongName)
		}
		if err == nil {
			t.Errorf("the runner exited 0 with a failing scenario")
		}
	}
	t.Run("go", func(t *testing.T) {
		h.restoreT(t)
		run := "added-" + strconv.FormatInt(time.Now().UnixNano()%1e6, 10)
		if err := runGoScenario(h, added, run, t.Logf); err != nil {
			t.Errorf("FAIL %s: %v", addedName, err)
		}
		err := runGoScenario(h, wrong, run, t.Logf)
		t.Logf("%s: %v", wrongName, err)
		if err == nil {
			t.Errorf("%s passed in the Go runner", wrongName)
		}
	})
	t.Run("typescript", func(t *testing.T) {
		if work == "" || !exists(filepath.Join(work, "dist", "test", "scenarios.test.js")) {
			skipOrFail(t, "the typescript run did not build clients/js")
		}
		h.restoreT(t)
		ctx, cancel := context.WithTimeout(context.Background(), runnerTimeout)
		defer cancel()
		out, err := runLogged(ctx, t, work, env, "node", "--test", filepath.Join("dist", "test", "scenarios.test.js"))
		judge(t, out, err)
	})
	t.Run("python", func(t *testing.T) {
		if python == "" {
			skipOrFail(t, "the python run did not happen")
		}
		h.restoreT(t)
		ctx, cancel := context.WithTimeout(context.Background(), runnerTimeout)
		defer cancel()
		out, err := runLogged(ctx, t, "python", env, python, "-m", "unittest", "discover", "-s", "tests", "-p", "test_scenarios.py", "-v")
		judge(t, out, err)
	})
}

// memDataDir puts the nodes' data on tmpfs (/dev/shm) where there is one:
// the harness tests the clients, and with 600 ms leases a Raft fsync held
// up by the disk load of the tests running beside it (make test runs the
// packages in parallel) can cost a renewal its deadline. Elsewhere the
// default directory is used.
func memDataDir(t *testing.T) func(int) string {
	dir, err := os.MkdirTemp("/dev/shm", "lockgate-clients-")
	if err != nil {
		t.Logf("no tmpfs for the nodes' data (%v): using the default directory", err)
		return nil
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return func(int) string { return dir }
}

// skipOrFail skips the test with msg, or fails it under CI=true, where
// `make deps` has installed every runner's tools: CI cannot go green by
// skipping a client.
func skipOrFail(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s [CI=true: failing instead of skipping]", msg)
	}
	t.Skip(msg)
}

// copySource copies the tree at src to dst, leaving out the top-level
// entries named in skip. Symbolic links are copied as links.
func copySource(src, dst string, skip ...string) error {
	return filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		if d.IsDir() && slices.Contains(skip, rel) {
			return filepath.SkipDir
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(path)
			if err != nil {
				return err
			}
			return os.Symlink(link, to)
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, info.Mode().Perm())
		}
		return nil
	})
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// checkReported fails t unless a runner's output has the line "ok NAME
// <n>ms" for every scenario of the set: a runner that exits 0 without
// running a scenario (or the whole set) must not pass.
func checkReported(t *testing.T, set scenarioSet, out []string) {
	t.Helper()
	for _, name := range unreported(set, out) {
		t.Errorf("the runner printed no \"ok %s <n>ms\" line: scenario %s not run, or not passed", name, name)
	}
}

// unreported are the scenarios of set without an "ok NAME <n>ms" line in
// out (anywhere in a line: test runners prefix their children's output).
func unreported(set scenarioSet, out []string) []string {
	var missing []string
	for _, s := range set.Scenarios {
		re := regexp.MustCompile(`(^|[^\w-])ok ` + regexp.QuoteMeta(s.Name) + ` \d+ms\b`)
		if !slices.ContainsFunc(out, re.MatchString) {
			missing = append(missing, s.Name)
		}
	}
	return missing
}

// runLogged runs name args in dir with env added, streaming its output
// line by line into t.Log, and kills its whole process group when ctx ends.
// It returns the output's lines.
func runLogged(ctx context.Context, t *testing.T, dir string, env []string, name string, args ...string) ([]string, error) {
	t.Helper()
	start := time.Now()
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var lines []string // written by the reader goroutine until wg.Wait
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64*1024), 1024*1024)
		for sc.Scan() {
			t.Log(sc.Text())
			lines = append(lines, sc.Text())
		}
		io.Copy(io.Discard, pr) // a line too long for the scanner: drain
	}()
	err := cmd.Run()
	pw.Close()
	wg.Wait()
	t.Logf("%s %s: %v after %v", name, strings.Join(args, " "), errOrOK(err), time.Since(start).Round(time.Millisecond))
	if ctx.Err() != nil {
		return lines, fmt.Errorf("%w (bound %v)", ctx.Err(), runnerTimeout)
	}
	return lines, err
}

func errOrOK(err error) any {
	if err == nil {
		return "ok"
	}
	return err
}

// harness serves the control API of the runners over a cluster.
type harness struct {
	rl      *testenv.Raftlock
	control string // http://127.0.0.1:PORT
	secure  string // host:port of a gateway that checks tokens (secureToken)
	log     func(string, ...any)

	mu     sync.Mutex // serializes kills and restores
	killed []*servers.RaftNode
}

// endpointsBody is the answer of GET /endpoints and POST /restore.
type endpointsBody struct {
	Endpoints []string `json:"endpoints"`
	Leader    string   `json:"leader"`
	Follower  string   `json:"follower"`
}

func newHarness(t *testing.T, rl *testenv.Raftlock) *harness {
	t.Helper()
	h := &harness{rl: rl, log: t.Logf}
	h.startSecureGateway(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /endpoints", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		body, err := h.endpointsLocked(r.Context())
		reply(w, body, err)
	})
	mux.HandleFunc("POST /kill-leader", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		addr, err := h.killLeaderLocked(r.Context())
		reply(w, map[string]string{"killed": addr}, err)
	})
	mux.HandleFunc("POST /restore", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		body, err := h.restoreLocked(r.Context())
		reply(w, body, err)
	})
	mux.HandleFunc("GET /ops", func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		defer h.mu.Unlock()
		ops, err := h.opsLocked(r.Context())
		reply(w, opsBody{Ops: ops}, err)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	h.control = "http://" + ln.Addr().String()
	return h
}

// reply writes body as JSON, or err as {"error": message} with status 500.
func reply(w http.ResponseWriter, body any, err error) {
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		w.WriteHeader(http.StatusInternalServerError)
		body = map[string]string{"error": err.Error()}
	}
	json.NewEncoder(w).Encode(body)
}

// opsBody is the answer of GET /ops: the lock operations the running nodes
// committed as leaders, by op (lockgate_raftlock_ops_total's op label:
// "renew" for a lease's own renewal, "session-renew" for a session's
// keep-alive, …), summed over the nodes. The session scenarios read it
// before and after a hold to count keep-alives on the server's side.
type opsBody struct {
	Ops map[string]float64 `json:"ops"`
}

// opsMetric is the Prometheus series GET /ops sums.
const opsMetric = "lockgate_raftlock_ops_total"

// opsLocked scrapes every running node's /metrics and sums opsMetric by op.
func (h *harness) opsLocked(ctx context.Context) (map[string]float64, error) {
	ops := map[string]float64{}
	for _, nd := range h.running() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+nd.APIAddr+"/metrics", nil)
		if err != nil {
			return nil, err
		}
		resp, err := peersClient.Do(req)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", nd.ID, err)
		}
		err = sumOps(resp.Body, ops)
		resp.Body.Close()
		if err != nil {
			return nil, fmt.Errorf("node %s /metrics: %w", nd.ID, err)
		}
	}
	return ops, nil
}

// opsLine is one sample of opsMetric in the Prometheus text format.
var opsLine = regexp.MustCompile(`^` + opsMetric + `\{(?:[^}]*,)?op="([^"]*)"[^}]*\} ([0-9.eE+-]+)`)

// sumOps adds the samples of opsMetric in a /metrics page to ops.
func sumOps(r io.Reader, ops map[string]float64) error {
	sc := bufio.NewScanner(io.LimitReader(r, 16<<20))
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		m := opsLine.FindStringSubmatch(sc.Text())
		if m == nil {
			continue
		}
		v, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			return fmt.Errorf("%q: %w", sc.Text(), err)
		}
		ops[m[1]] += v
	}
	return sc.Err()
}

// env is the environment of a runner: scenariosDir is the directory of
// the scenarios it runs.
func (h *harness) env(scenariosDir string) []string {
	return []string{
		"LOCKGATE_ENDPOINTS=" + strings.Join(h.rl.APIAddrs, ","),
		"LOCKGATE_CONTROL=" + h.control,
		"LOCKGATE_SCENARIOS=" + scenariosDir,
		"LOCKGATE_SECURE_ENDPOINT=" + h.secure,
		"LOCKGATE_TOKEN=" + secureToken,
	}
}

// secureToken is the bearer token of the harness's secure gateway.
const secureToken = "clients-harness-token-7f3a9c"

// startSecureGateway serves a gateway that checks bearer tokens in front
// of the cluster (its Locker is the Go SDK, following the leader), on a
// loopback port: the browser test authenticates to it through the
// lockgate.bearer subprotocol, since a page cannot set Authorization.
func (h *harness) startSecureGateway(t *testing.T) {
	toks, err := gateway.NewTokens(secureToken)
	if err != nil {
		t.Fatal(err)
	}
	sdk, err := client.New(h.rl.APIAddrs, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := gateway.New(sdk, gateway.Options{Tokens: toks})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: g, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { g.Close(); srv.Close(); sdk.Close() })
	h.secure = ln.Addr().String()
}

// restoreT restores the cluster before a runner starts, failing t if it
// cannot.
func (h *harness) restoreT(t *testing.T) {
	t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	if _, err := h.restoreLocked(context.Background()); err != nil {
		t.Fatalf("restoring the cluster: %v", err)
	}
}

// running are the nodes whose process runs.
func (h *harness) running() []*servers.RaftNode {
	var rs []*servers.RaftNode
	for _, nd := range h.rl.Nodes {
		if nd.PID() != 0 {
			rs = append(rs, nd.RaftNode)
		}
	}
	return rs
}

// endpointsLocked waits until every running node names the same leader,
// with its API address, and that leader names itself; then it reports the
// running nodes' addresses, the leader and a follower.
func (h *harness) endpointsLocked(ctx context.Context) (*endpointsBody, error) {
	ctx, cancel := context.WithTimeout(ctx, leaderWait)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		body, err := h.agreedLeader(ctx)
		if err == nil {
			return body, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("no leader known to every running node within %v: %w", leaderWait, err)
		case <-tick.C:
		}
	}
}

// agreedLeader is one look at every running node's peer list.
func (h *harness) agreedLeader(ctx context.Context) (*endpointsBody, error) {
	nodes := h.running()
	if len(nodes) == 0 {
		return nil, errors.New("no node runs")
	}
	body := &endpointsBody{}
	for _, nd := range nodes {
		pl, err := peers(ctx, nd.APIAddr)
		if err != nil {
			return nil, fmt.Errorf("node %s: %w", nd.ID, err)
		}
		if pl.LeaderID == "" || pl.LeaderAddr == "" {
			return nil, fmt.Errorf("node %s knows no leader (id %q, addr %q)", nd.ID, pl.LeaderID, pl.LeaderAddr)
		}
		if body.Leader != "" && pl.LeaderAddr != body.Leader {
			return nil, fmt.Errorf("node %s names leader %s, another node %s", nd.ID, pl.LeaderAddr, body.Leader)
		}
		body.Leader = pl.LeaderAddr
		body.Endpoints = append(body.Endpoints, nd.APIAddr)
	}
	leaderRuns := false
	for _, nd := range nodes {
		switch {
		case nd.APIAddr == body.Leader:
			leaderRuns = true
		case body.Follower == "":
			body.Follower = nd.APIAddr
		}
	}
	if !leaderRuns {
		// The survivors of a kill name the dead leader until they notice.
		return nil, fmt.Errorf("the nodes name %s as leader, which does not run", body.Leader)
	}
	if body.Follower == "" {
		return nil, fmt.Errorf("the leader %s is the only running node", body.Leader)
	}
	return body, nil
}

// peerList is the part of raftlock's GET /v1/cluster/peers the harness
// reads.
type peerList struct {
	LeaderID   string `json:"leaderId"`
	LeaderAddr string `json:"leaderAddr"`
}

var peersClient = &http.Client{Timeout: 2 * time.Second}

func peers(ctx context.Context, addr string) (*peerList, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+"/v1/cluster/peers", nil)
	if err != nil {
		return nil, err
	}
	resp, err := peersClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var pl peerList
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64*1024)).Decode(&pl); err != nil {
		return nil, fmt.Errorf("/v1/cluster/peers: %s: %w", resp.Status, err)
	}
	return &pl, nil
}

// killLeaderLocked SIGKILLs the leader that every running node knows and
// returns its API address at once, without waiting for the next election.
func (h *harness) killLeaderLocked(ctx context.Context) (string, error) {
	body, err := h.endpointsLocked(ctx)
	if err != nil {
		return "", err
	}
	for _, nd := range h.rl.Nodes {
		if nd.APIAddr == body.Leader {
			nd.Kill()
			h.killed = append(h.killed, nd.RaftNode)
			h.log("control: killed the leader %s (node %s)", nd.APIAddr, nd.ID)
			return nd.APIAddr, nil
		}
	}
	return "", fmt.Errorf("the leader's address %s is no node of the cluster", body.Leader)
}

// restoreLocked restarts every killed node and waits for a leader that
// every node knows.
func (h *harness) restoreLocked(ctx context.Context) (*endpointsBody, error) {
	for len(h.killed) > 0 {
		nd := h.killed[0]
		if err := nd.Restart(); err != nil {
			return nil, fmt.Errorf("restarting node %s: %w", nd.ID, err)
		}
		h.log("control: restarted node %s (%s)", nd.ID, nd.APIAddr)
		h.killed = h.killed[1:]
	}
	return h.endpointsLocked(ctx)
}
