package servers

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// ZooKeeperJars is where Debian's zookeeper package (3.8) installs its
// jars. zookeeper.jar's manifest names its dependencies by absolute path
// (jute, netty, jackson, slf4j-api, ...), so it is the whole classpath of
// the server, as in the package's zkEnv.sh.
const ZooKeeperJars = "/usr/share/java"

// ZooKeeper is a ZooKeeper ensemble of one or more members, each a
// separate JVM (QuorumPeerMain) with its own data directory and its own
// client, quorum and election ports on 127.0.0.1. One member runs
// standalone; three form a quorum. Close stops it and removes its data.
type ZooKeeper struct {
	// Addrs are the members' client addresses (127.0.0.1:<port>), in member
	// order, for zk.Connect.
	Addrs []string
	// Members are the ensemble's members, in the order of Addrs.
	Members []*ZooKeeperMember

	base string // removed by Close
}

// ZooKeeperMember is one member process of a ZooKeeper ensemble.
type ZooKeeperMember struct {
	// ID is the member's myid, 1, 2, ...
	ID int
	// Addr is the member's client address, 127.0.0.1:<ClientPort>.
	Addr string
	// ClientPort, QuorumPort and ElectionPort are the member's ports on
	// 127.0.0.1; only the leader listens on its QuorumPort. A standalone
	// member (an ensemble of one) has neither: both are 0.
	ClientPort, QuorumPort, ElectionPort int
	// DataDir holds the member's myid, snapshots and transaction log; it
	// is kept across Restart.
	DataDir string

	proc *proc
}

// ZooKeeperOptions adjusts StartZooKeeper.
type ZooKeeperOptions struct {
	// Java is the java binary; empty: looked up with LookBinary.
	Java string
	// ClassPath is the server's classpath; empty: ZooKeeperClassPath("").
	ClassPath string
	// TickTime is ZooKeeper's tick; sessions negotiate a timeout between 2
	// and 20 ticks. Zero means 2 s, ZooKeeper's shipped default (session
	// timeouts of 4 s to 40 s).
	TickTime time.Duration
	// Log receives the members' output (their WARN and ERROR lines); nil
	// discards it.
	Log Logger

	pick portPicker // nil: freePorts; tests of the retry path set it
}

// ZooKeeperClassPath returns the classpath Debian's zookeeper package runs
// its server with, from the jars under dir (empty: ZooKeeperJars):
// zookeeper.jar, whose manifest brings its dependencies, plus the
// slf4j-simple binding when it is there (libslf4j-java, a dependency of
// the package), so that the server's warnings and errors reach stderr (the
// package's own log4j setup writes to /var/log/zookeeper instead). It
// returns a *MissingError naming the Debian package "zookeeper" when
// zookeeper.jar is absent.
func ZooKeeperClassPath(dir string) (string, error) {
	if dir == "" {
		dir = ZooKeeperJars
	}
	jar := filepath.Join(dir, "zookeeper.jar")
	if fi, err := os.Stat(jar); err != nil || !fi.Mode().IsRegular() {
		return "", &MissingError{What: "ZooKeeper (" + jar + ")", Package: "zookeeper"}
	}
	cp := []string{jar}
	if simple := filepath.Join(dir, "slf4j-simple.jar"); fileExists(simple) {
		cp = append(cp, simple)
	}
	return strings.Join(cp, ":"), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// StartZooKeeper starts an n-member ZooKeeper ensemble (n >= 1; 1 runs
// standalone, 3 is the usual quorum) and returns once every member answers
// the four-letter command srvr with its Mode (standalone, leader or
// follower), which for an ensemble needs an elected leader. The members
// run `java -Xmx256m -cp <classpath> QuorumPeerMain <zoo.cfg>` with the
// admin server off, no remote JMX, and only ruok and srvr of the
// four-letter commands; they log WARN and above to stderr.
//
// It fails with a *MissingError (ErrNotInstalled) if java (Debian package
// default-jre-headless) or ZooKeeper (package zookeeper) is not installed,
// and with the tail of the members' logs if the ensemble is not ready
// within readyTimeout (or ctx ends). On error nothing is left running.
func StartZooKeeper(ctx context.Context, n int, opts ZooKeeperOptions) (*ZooKeeper, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: StartZooKeeper: n = %d, want at least 1", n)
	}
	if opts.ClassPath == "" {
		cp, err := ZooKeeperClassPath("")
		if err != nil {
			return nil, err
		}
		opts.ClassPath = cp
	}
	if opts.Java == "" {
		bin, err := LookBinary("java", "default-jre-headless")
		if err != nil {
			return nil, err
		}
		opts.Java = bin
	}
	if opts.TickTime <= 0 {
		opts.TickTime = 2 * time.Second
	}
	if opts.pick == nil {
		opts.pick = freePorts
	}
	base, err := os.MkdirTemp("", "lockgate-zookeeper-")
	if err != nil {
		return nil, fmt.Errorf("servers: StartZooKeeper: %w", err)
	}
	z := &ZooKeeper{base: base}

	// The JVM reads these on its own; one from the environment would add
	// flags (a debugger, a JMX port) or noise to ours.
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "JAVA_TOOL_OPTIONS=") && !strings.HasPrefix(kv, "_JAVA_OPTIONS=") && !strings.HasPrefix(kv, "JDK_JAVA_OPTIONS=") {
			env = append(env, kv)
		}
	}

	err = retryPorts(3*n, opts.pick, func(ports []int, attempt int) error {
		// Fresh data directories per attempt, so that a member of a failed
		// attempt cannot bring its state into this one.
		dir := filepath.Join(base, fmt.Sprintf("attempt%d", attempt))
		z.Members = make([]*ZooKeeperMember, n)
		z.Addrs = make([]string, n)
		var servers []string
		for i := range z.Members {
			m := &ZooKeeperMember{
				ID:           i + 1,
				ClientPort:   ports[3*i],
				QuorumPort:   ports[3*i+1],
				ElectionPort: ports[3*i+2],
			}
			if n == 1 {
				m.QuorumPort, m.ElectionPort = 0, 0 // standalone
			}
			m.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(m.ClientPort))
			m.DataDir = filepath.Join(dir, fmt.Sprintf("zk%d", m.ID))
			z.Members[i] = m
			z.Addrs[i] = m.Addr
			servers = append(servers, fmt.Sprintf("server.%d=127.0.0.1:%d:%d", m.ID, m.QuorumPort, m.ElectionPort))
		}
		for _, m := range z.Members {
			if err := m.configure(opts, env, n, servers); err != nil {
				return err
			}
		}
		if err := z.startMembers(ctx); err != nil {
			z.Stop()
			return err
		}
		return nil
	})
	if err != nil {
		z.Close()
		return nil, fmt.Errorf("servers: StartZooKeeper: %w", err)
	}
	return z, nil
}

// configure writes the member's data directory, myid and zoo.cfg, and
// sets up its proc.
func (m *ZooKeeperMember) configure(opts ZooKeeperOptions, env []string, n int, servers []string) error {
	if err := os.MkdirAll(m.DataDir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(m.DataDir, "myid"), []byte(strconv.Itoa(m.ID)+"\n"), 0o600); err != nil {
		return err
	}
	cfg := []string{
		fmt.Sprintf("tickTime=%d", opts.TickTime.Milliseconds()),
		"initLimit=10",
		"syncLimit=5",
		"dataDir=" + m.DataDir,
		fmt.Sprintf("clientPort=%d", m.ClientPort),
		"clientPortAddress=127.0.0.1",
		"maxClientCnxns=0",
		"admin.enableServer=false",
		"4lw.commands.whitelist=ruok,srvr",
		// Purge old snapshots and logs hourly; a long bench writes many.
		"autopurge.snapRetainCount=3",
		"autopurge.purgeInterval=1",
	}
	ports := []int{m.ClientPort}
	if n > 1 {
		cfg = append(cfg, servers...)
		// Every participant listens on its election port; only the leader
		// on its quorum port, so that one is not checked.
		ports = append(ports, m.ElectionPort)
	}
	cfgPath := filepath.Join(m.DataDir, "zoo.cfg")
	if err := os.WriteFile(cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o600); err != nil {
		return err
	}
	m.proc = &proc{
		log:   opts.Log,
		name:  fmt.Sprintf("zookeeper[%d %s]", m.ID, m.Addr),
		path:  opts.Java,
		dir:   m.DataDir,
		env:   env,
		ports: ports,
		args: []string{
			"-Xmx256m",
			"-XX:+UseSerialGC",
			"-XX:-UsePerfData", // no /tmp/hsperfdata_* left behind by a SIGKILL
			"-Djava.net.preferIPv4Stack=true",
			"-Dzookeeper.admin.enableServer=false",
			"-Dzookeeper.jmx.log4j.disable=true",
			// A taken election port ends the member at once (exit code
			// 14) instead of after three one-second retries, so that
			// StartZooKeeper retries with other ports sooner.
			"-Dzookeeper.electionPortBindRetry=1",
			"-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
			"-Dorg.slf4j.simpleLogger.logFile=System.err",
			"-cp", opts.ClassPath,
			"org.apache.zookeeper.server.quorum.QuorumPeerMain",
			cfgPath,
		},
	}
	return nil
}

// startMembers starts the members that are not running, together, and
// waits until every member reports a Mode.
func (z *ZooKeeper) startMembers(ctx context.Context) error {
	return startStopped(ctx, z.Members, func(m *ZooKeeperMember) (*proc, func() error) { return m.proc, m.ready })
}

// Close stops the ensemble (see Stop) and removes its data.
func (z *ZooKeeper) Close() {
	z.Stop()
	os.RemoveAll(z.base)
}

// Stop stops every running member (see ZooKeeperMember.Stop),
// concurrently; paused members are resumed first. Stopping an ensemble
// that is not running does nothing.
func (z *ZooKeeper) Stop() {
	var wg sync.WaitGroup
	for _, m := range z.Members {
		if m.proc == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			m.proc.stop()
		}()
	}
	wg.Wait()
}

// Restart starts every member that is not running (stopping none; paused
// members are not resumed) with its data directory and ports, and waits
// until every member reports a Mode. Use it after stopping a quorum of
// members, where restarting them one by one with ZooKeeperMember.Restart
// would wait for a quorum that is not there.
func (z *ZooKeeper) Restart() error {
	if err := z.startMembers(context.Background()); err != nil {
		return fmt.Errorf("servers: ZooKeeper.Restart: %w", err)
	}
	return nil
}

// Mode asks the member with the four-letter command srvr what it is:
// "standalone", "leader" or "follower". It fails while the member does
// not serve (no quorum, election under way, not running).
func (m *ZooKeeperMember) Mode() (string, error) {
	out, err := fourLetter(m.Addr, "srvr")
	if err != nil {
		return "", err
	}
	for _, line := range strings.Split(out, "\n") {
		if mode, ok := strings.CutPrefix(line, "Mode: "); ok {
			return strings.TrimSpace(mode), nil
		}
	}
	return "", fmt.Errorf("srvr: no Mode in %q", strings.TrimSpace(out))
}

// ready reports nil once the member serves as standalone, leader or
// follower.
func (m *ZooKeeperMember) ready() error {
	mode, err := m.Mode()
	if err != nil {
		return err
	}
	switch mode {
	case "standalone", "leader", "follower":
		return nil
	}
	return fmt.Errorf("srvr: Mode %q", mode)
}

// fourLetter sends a four-letter command and returns the whole answer
// (the server closes the connection after it).
func fourLetter(addr, cmd string) (string, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return "", err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, cmd); err != nil {
		return "", err
	}
	b, err := io.ReadAll(io.LimitReader(c, 64*1024))
	if err != nil {
		return "", fmt.Errorf("%s: %w", cmd, err)
	}
	return string(b), nil
}

// PID returns the process ID of the running member, or 0 if it is not
// running.
func (m *ZooKeeperMember) PID() int { return m.proc.pid() }

// Stop shuts the member down: SIGCONT if paused, SIGTERM, and SIGKILL if it
// has not exited after stopTimeout. It returns once the process is reaped.
// Stopping a member that is not running does nothing.
func (m *ZooKeeperMember) Stop() { m.proc.stop() }

// Kill sends SIGKILL and returns once the process is reaped. Killing a
// member that is not running does nothing.
func (m *ZooKeeperMember) Kill() { m.proc.kill() }

// Restart starts the member again with the same id, data directory and
// ports (stopping it first if it is still running). It returns once the
// member reports a Mode, which in an ensemble needs a quorum running (see
// ZooKeeper.Restart otherwise), and fails if it does not within
// readyTimeout.
func (m *ZooKeeperMember) Restart() error {
	return m.proc.restart("ZooKeeperMember.Restart", m.ready)
}

// Pause freezes the member with SIGSTOP; to its peers and clients it looks
// like a network partition until Resume. It fails with ErrNotRunning if the
// member is not running.
func (m *ZooKeeperMember) Pause() error { return m.proc.pause() }

// Resume continues a paused member with SIGCONT. It fails with
// ErrNotRunning if the member is not running.
func (m *ZooKeeperMember) Resume() error { return m.proc.resume() }
