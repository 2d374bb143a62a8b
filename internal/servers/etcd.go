package servers

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Etcd is an etcd cluster of one or more members, each a separate etcd
// (v3.4) process with its own data directory and its own client and peer
// ports on 127.0.0.1. Close stops it and removes its data.
type Etcd struct {
	// Endpoints are the members' client URLs (http://127.0.0.1:<port>), in
	// member order, for clientv3.Config.Endpoints.
	Endpoints []string
	// Members are the cluster members, in the order of Endpoints.
	Members []*EtcdMember

	base string // removed by Close
}

// EtcdMember is one member process of an Etcd cluster.
type EtcdMember struct {
	// Name is the member name (--name), "etcd0", "etcd1", ...
	Name string
	// ClientURL is the member's client URL, http://127.0.0.1:<port>.
	ClientURL string
	// PeerURL is the member's peer URL, http://127.0.0.1:<port>, where
	// it listens for its peers.
	PeerURL string
	// AdvertisePeerURL is the peer URL the other members dial: PeerURL,
	// or what EtcdOptions.AdvertisePeer returned (a proxy).
	AdvertisePeerURL string
	// DataDir is the member's data directory, kept across Restart.
	DataDir string

	proc *proc
}

// EtcdOptions adjusts StartEtcd.
type EtcdOptions struct {
	// Bin is the etcd binary; empty: looked up with LookBinary.
	Bin string
	// Log receives the members' output; nil discards it.
	Log Logger

	// AdvertisePeer, when not nil, returns the peer URL that member i
	// advertises (and its peers dial) in place of its own, e.g. a proxy
	// in front of m.PeerURL. It is called once per start attempt for
	// every member, before any starts.
	AdvertisePeer func(i int, m *EtcdMember) (string, error)

	pick portPicker // nil: freePorts; tests of the retry path set it
}

// healthClient probes /health; no keep-alive, so no idle connections or
// goroutines outlive a probe.
var healthClient = &http.Client{
	Timeout:   time.Second,
	Transport: &http.Transport{DisableKeepAlives: true, Proxy: nil},
}

// StartEtcd starts an n-member etcd cluster (n >= 1; typically 1 or 3)
// bootstrapped statically with --initial-cluster naming every member, and
// returns once every member answers GET <ClientURL>/health with health true
// (which needs an elected leader). Logging is zap at level warn on stderr.
//
// It fails with a *MissingError (ErrNotInstalled) if etcd is not installed
// (Debian package "etcd-server"), and with the tail of the members' logs if
// the cluster is not healthy within readyTimeout (or ctx ends). On error
// nothing is left running.
func StartEtcd(ctx context.Context, n int, opts EtcdOptions) (*Etcd, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: StartEtcd: n = %d, want at least 1", n)
	}
	if opts.Bin == "" {
		bin, err := LookBinary("etcd", "etcd-server")
		if err != nil {
			return nil, err
		}
		opts.Bin = bin
	}
	if opts.pick == nil {
		opts.pick = freePorts
	}
	base, err := os.MkdirTemp("", "lockgate-etcd-")
	if err != nil {
		return nil, fmt.Errorf("servers: StartEtcd: %w", err)
	}
	e := &Etcd{base: base}

	// etcd reads ETCD_* variables as flags; a stray one from the
	// environment would change or conflict with ours.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "ETCD_") {
			env = append(env, kv)
		}
	}

	err = retryPorts(2*n, opts.pick, func(ports []int, attempt int) error {
		// A fresh token and fresh data directories per attempt, so that
		// members of a failed attempt (or of another cluster that reuses a
		// port later) cannot join this one.
		token := "servers-" + randomHex(8)
		dir := filepath.Join(base, fmt.Sprintf("attempt%d", attempt))
		e.Members = make([]*EtcdMember, n)
		e.Endpoints = make([]string, n)
		var initialCluster []string
		for i := range e.Members {
			m := &EtcdMember{
				Name:      fmt.Sprintf("etcd%d", i),
				ClientURL: fmt.Sprintf("http://127.0.0.1:%d", ports[2*i]),
				PeerURL:   fmt.Sprintf("http://127.0.0.1:%d", ports[2*i+1]),
			}
			m.DataDir = filepath.Join(dir, m.Name)
			m.AdvertisePeerURL = m.PeerURL
			e.Members[i] = m
			e.Endpoints[i] = m.ClientURL
		}
		for i, m := range e.Members {
			if opts.AdvertisePeer != nil {
				u, err := opts.AdvertisePeer(i, m)
				if err != nil {
					return err
				}
				m.AdvertisePeerURL = u
			}
			initialCluster = append(initialCluster, m.Name+"="+m.AdvertisePeerURL)
		}
		for i, m := range e.Members {
			if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
				return err
			}
			m.proc = &proc{
				log:   opts.Log,
				name:  fmt.Sprintf("etcd[%s %s]", m.Name, strings.TrimPrefix(m.ClientURL, "http://")),
				path:  opts.Bin,
				dir:   m.DataDir,
				env:   env,
				ports: []int{ports[2*i], ports[2*i+1]},
				args: []string{
					"--name", m.Name,
					"--data-dir", m.DataDir,
					"--listen-client-urls", m.ClientURL,
					"--advertise-client-urls", m.ClientURL,
					"--listen-peer-urls", m.PeerURL,
					"--initial-advertise-peer-urls", m.AdvertisePeerURL,
					"--initial-cluster", strings.Join(initialCluster, ","),
					"--initial-cluster-state", "new",
					"--initial-cluster-token", token,
					"--logger", "zap",
					"--log-level", "warn",
					"--log-outputs", "stderr",
				},
			}
		}
		if err := e.startMembers(ctx); err != nil {
			e.Stop()
			return err
		}
		return nil
	})
	if err != nil {
		e.Close()
		return nil, fmt.Errorf("servers: StartEtcd: %w", err)
	}
	return e, nil
}

// startMembers starts the members that are not running, together, and
// waits until every member reports healthy.
func (e *Etcd) startMembers(ctx context.Context) error {
	return startStopped(ctx, e.Members, func(m *EtcdMember) (*proc, func() error) { return m.proc, m.health })
}

// Close stops the cluster (see Stop) and removes its data.
func (e *Etcd) Close() {
	e.Stop()
	os.RemoveAll(e.base)
}

// Stop stops every running member gracefully (see EtcdMember.Stop):
// paused members are resumed, then the followers are stopped, and the
// leader last. Stopping the leader together with its followers would make
// it wait for a leadership transfer that cannot complete (about 7 s).
// Stopping a cluster that is not running does nothing.
func (e *Etcd) Stop() {
	var followers, others []*EtcdMember
	for _, m := range e.Members {
		if m.proc == nil || m.PID() == 0 {
			continue
		}
		m.proc.unpause()
		if m.isFollower() {
			followers = append(followers, m)
		} else {
			others = append(others, m)
		}
	}
	stopMembers(followers)
	stopMembers(others)
	for _, m := range e.Members {
		if m.proc != nil {
			m.proc.stop() // waits for members that exited on their own
		}
	}
}

// stopMembers stops ms concurrently.
func stopMembers(ms []*EtcdMember) {
	var wg sync.WaitGroup
	for _, m := range ms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.proc.stop()
		}()
	}
	wg.Wait()
}

// isFollower reports whether the member's /metrics say it is running and
// not the leader.
func (m *EtcdMember) isFollower() bool {
	leads, ok := m.leads()
	return ok && !leads
}

// IsLeader reports whether the member's /metrics say it leads the
// cluster (false when it does not answer).
func (m *EtcdMember) IsLeader() bool {
	leads, ok := m.leads()
	return ok && leads
}

// leads reads etcd_server_is_leader from the member's /metrics; ok is
// false when the member does not answer or does not report it.
func (m *EtcdMember) leads() (leads, ok bool) {
	resp, err := healthClient.Get(m.ClientURL + "/metrics")
	if err != nil {
		return false, false
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64*1024), 1024*1024)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "etcd_server_is_leader" {
			return f[1] == "1", true
		}
	}
	return false, false
}

// Restart starts every member that is not running (stopping none; paused
// members are not resumed) with its data directory and ports, and waits
// until all members are healthy.
// Use it after stopping a quorum of members, where restarting them one by
// one with EtcdMember.Restart would wait for a quorum that is not there.
func (e *Etcd) Restart() error {
	if err := e.startMembers(context.Background()); err != nil {
		return fmt.Errorf("servers: Etcd.Restart: %w", err)
	}
	return nil
}

// health reports nil if GET <ClientURL>/health says health is true.
func (m *EtcdMember) health() error {
	resp, err := healthClient.Get(m.ClientURL + "/health")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	if err != nil {
		return err
	}
	var h struct {
		Health any `json:"health"` // "true" in 3.4, true in some versions
	}
	if err := json.Unmarshal(body, &h); err != nil {
		return fmt.Errorf("/health: %s: %v", resp.Status, err)
	}
	if h.Health == "true" || h.Health == true {
		return nil
	}
	return fmt.Errorf("/health: %s: %s", resp.Status, strings.TrimSpace(string(body)))
}

// PID returns the process ID of the running member, or 0 if it is not
// running.
func (m *EtcdMember) PID() int { return m.proc.pid() }

// Stop shuts the member down: SIGCONT if paused, SIGTERM, and SIGKILL if it
// has not exited after stopTimeout. It returns once the process is reaped.
// Stopping a member that is not running does nothing.
func (m *EtcdMember) Stop() { m.proc.stop() }

// Kill sends SIGKILL and returns once the process is reaped. Killing a
// member that is not running does nothing.
func (m *EtcdMember) Kill() { m.proc.kill() }

// Restart starts the member again with the same name, data directory and
// ports (stopping it first if it is still running); it rejoins from its
// data directory. It returns once the member reports healthy, which needs a
// quorum of the cluster running (see Etcd.Restart otherwise), and fails if
// it does not become healthy within readyTimeout.
func (m *EtcdMember) Restart() error { return m.proc.restart("EtcdMember.Restart", m.health) }

// Pause freezes the member with SIGSTOP; to its peers it looks like a
// network partition until Resume. It fails with ErrNotRunning if the
// member is not running.
func (m *EtcdMember) Pause() error { return m.proc.pause() }

// Resume continues a paused member with SIGCONT. It fails with
// ErrNotRunning if the member is not running.
func (m *EtcdMember) Resume() error { return m.proc.resume() }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
