package servers

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"
)

// Redis is a redis-server process: an independent master, no persistence.
// Close stops it and removes its directory.
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

// RedisOptions adjusts StartRedis.
type RedisOptions struct {
	// Bin is the redis-server binary; empty: looked up with LookBinary.
	Bin string
	// Log receives the server's output; nil discards it.
	Log Logger

	pick portPicker // nil: freePorts; tests of the retry path set it
}

// StartRedis starts a redis-server on a free port of 127.0.0.1 and returns
// once it answers PING. It fails with a *MissingError (ErrNotInstalled) if
// redis-server is not installed, and with the tail of the server's log if
// it does not become ready within readyTimeout (or ctx ends). On error
// nothing is left running.
func StartRedis(ctx context.Context, opts RedisOptions) (*Redis, error) {
	if opts.Bin == "" {
		bin, err := LookBinary("redis-server", "redis-server")
		if err != nil {
			return nil, err
		}
		opts.Bin = bin
	}
	if opts.pick == nil {
		opts.pick = freePorts
	}
	dir, err := os.MkdirTemp("", "lockgate-redis-")
	if err != nil {
		return nil, fmt.Errorf("servers: StartRedis: %w", err)
	}
	r := &Redis{Dir: dir, proc: &proc{log: opts.Log, path: opts.Bin, dir: dir}}
	err = retryPorts(1, opts.pick, func(ports []int, _ int) error {
		r.setPort(ports[0])
		if err := r.proc.start(); err != nil {
			return err
		}
		if err := waitAll(ctx, time.Now().Add(readyTimeout), []*proc{r.proc}, []func() error{r.ping}); err != nil {
			r.proc.stop()
			return err
		}
		return nil
	})
	if err != nil {
		r.Close()
		return nil, fmt.Errorf("servers: StartRedis: %w", err)
	}
	return r, nil
}

// StartRedisN starts n independent redis-server masters concurrently (see
// StartRedis) and returns them once all answer PING. On error none is left
// running.
func StartRedisN(ctx context.Context, n int, opts RedisOptions) ([]*Redis, error) {
	if n < 1 {
		return nil, fmt.Errorf("servers: StartRedisN: n = %d, want at least 1", n)
	}
	if opts.Bin == "" {
		bin, err := LookBinary("redis-server", "redis-server")
		if err != nil {
			return nil, err
		}
		opts.Bin = bin
	}
	rs := make([]*Redis, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range rs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs[i], errs[i] = StartRedis(ctx, opts)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		for _, r := range rs {
			if r != nil {
				r.Close()
			}
		}
		return nil, err
	}
	return rs, nil
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

// Close stops the server (see Stop) and removes its directory.
func (r *Redis) Close() {
	r.proc.stop()
	os.RemoveAll(r.Dir)
}

// PID returns the process ID of the running server, or 0 if it is not
// running (stopped, killed, or exited on its own).
func (r *Redis) PID() int { return r.proc.pid() }

// Stop shuts the server down: SIGCONT if paused, SIGTERM, and SIGKILL if it
// has not exited after stopTimeout. It returns once the process is reaped.
// Stopping a server that is not running does nothing.
func (r *Redis) Stop() { r.proc.stop() }

// Kill sends SIGKILL and returns once the process is reaped. Killing a
// server that is not running does nothing.
func (r *Redis) Kill() { r.proc.kill() }

// Restart starts the server again on the same port and directory (stopping
// it first if it is still running) and returns once it answers PING. As
// persistence is off, the restarted server holds no keys.
func (r *Redis) Restart() error { return r.proc.restart("Redis.Restart", r.ping) }

// Pause freezes the server with SIGSTOP: connections stay open (and new
// ones are accepted by the kernel) but no command is answered until Resume.
// It fails with ErrNotRunning if the server is not running.
func (r *Redis) Pause() error { return r.proc.pause() }

// Resume continues a paused server with SIGCONT. It fails with
// ErrNotRunning if the server is not running.
func (r *Redis) Resume() error { return r.proc.resume() }
