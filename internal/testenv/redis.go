package testenv

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Redis is a redis-server process (an independent master, no persistence)
// owned by a test. It is stopped by a t.Cleanup registered by StartRedis.
// Its methods must not be called after the test has finished.
type Redis struct {
	// Addr is the address clients connect to, "127.0.0.1:<Port>".
	Addr string
	// Port is the TCP port the server listens on; it stays the same across
	// Restart.
	Port int
	// Dir is the server's working directory (--dir). Persistence is off,
	// so the data set is empty after every Restart.
	Dir string

	proc *proc
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 and returns
// once it answers PING. It skips (or under CI=true fails) the test if
// redis-server is not installed, and fails the test with the tail of the
// server's log if it does not become ready within 30 seconds. The server is
// stopped, and its directory removed, when the test and its subtests finish.
func StartRedis(t testing.TB) *Redis {
	t.Helper()
	bin := RequireBinary(t, "redis-server", "redis-server")
	r, err := startRedis(t, bin, freePorts)
	if err != nil {
		t.Fatalf("testenv: StartRedis: %v", err)
	}
	return r
}

// StartRedisN starts n independent redis-server masters concurrently (see
// StartRedis) and returns them once all answer PING.
func StartRedisN(t testing.TB, n int) []*Redis {
	t.Helper()
	if n < 1 {
		t.Fatalf("testenv: StartRedisN: n = %d, want at least 1", n)
	}
	bin := RequireBinary(t, "redis-server", "redis-server")
	rs := make([]*Redis, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i], errs[i] = startRedis(t, bin, freePorts)
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatalf("testenv: StartRedisN: %v", err)
		}
	}
	return rs
}

// startRedis starts one server, retrying with a new port when the chosen
// one was taken. It does not call t.Fatal, so it may run on any goroutine.
func startRedis(t testing.TB, bin string, pick portPicker) (*Redis, error) {
	dir, err := os.MkdirTemp("", "testenv-redis-")
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	r := &Redis{Dir: dir, proc: &proc{t: t, path: bin, dir: dir}}
	t.Cleanup(func() {
		r.proc.stop()
		os.RemoveAll(dir)
	})
	err = retryPorts(1, pick, func(ports []int, _ int) error {
		r.setPort(ports[0])
		if err := r.proc.start(); err != nil {
			return err
		}
		if err := r.proc.waitReady(time.Now().Add(readyTimeout), r.ping); err != nil {
			r.proc.stop()
			return err
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return r, nil
}

func (r *Redis) setPort(port int) {
	r.Port = port
	r.Addr = net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	r.proc.name = "redis[" + r.Addr + "]"
	r.proc.ports = []int{port}
	r.proc.args = []string{
		"--port", strconv.Itoa(port),
		"--bind", "127.0.0.1",
		"--dir", r.Dir,
		"--save", "",
		"--appendonly", "no",
		"--daemonize", "no",
		"--loglevel", "warning",
		"--logfile", "",
	}
}

// ping sends a RESP PING and expects +PONG.
func (r *Redis) ping() error {
	c, err := net.DialTimeout("tcp", r.Addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	if err := c.SetDeadline(time.Now().Add(time.Second)); err != nil {
		return err
	}
	if _, err := c.Write([]byte("*1\r\n$4\r\nPING\r\n")); err != nil {
		return err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if line != "+PONG\r\n" {
		return fmt.Errorf("PING answered %q", line)
	}
	return nil
}

// PID returns the process ID of the running server, or 0 if it is not
// running (stopped, killed, or exited on its own).
func (r *Redis) PID() int { return r.proc.pid() }

// Stop shuts the server down: SIGCONT if paused, SIGTERM, and SIGKILL if it
// has not exited after 10 seconds. It returns once the process is reaped.
// Stopping a server that is not running does nothing.
func (r *Redis) Stop() { r.proc.stop() }

// Kill sends SIGKILL and returns once the process is reaped. Killing a
// server that is not running does nothing.
func (r *Redis) Kill() { r.proc.kill() }

// Restart starts the server again on the same port and directory (stopping
// it first if it is still running) and returns once it answers PING; the
// test fails if it does not. As persistence is off, the restarted server
// holds no keys.
func (r *Redis) Restart() {
	r.proc.t.Helper()
	r.proc.restart("Redis.Restart", r.ping)
}

// Pause freezes the server with SIGSTOP: connections stay open (and new
// ones are accepted by the kernel) but no command is answered until Resume.
func (r *Redis) Pause() { r.proc.pause() }

// Resume continues a paused server with SIGCONT. Pausing or resuming a server
// that is not running marks the test failed (t.Errorf).
func (r *Redis) Resume() { r.proc.resume() }
