package testenv

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

const (
	// PostgresUser is the superuser created by initdb; it authenticates
	// with trust (no password) over TCP from 127.0.0.1.
	PostgresUser = "postgres"
	// PostgresDatabase is the database named in Postgres.URL.
	PostgresDatabase = "postgres"
)

// Postgres is a PostgreSQL server (postmaster running in the foreground,
// so its PID is ours) with a fresh data directory, owned by a test. It is
// stopped, and its data directory removed, by a t.Cleanup registered by
// StartPostgres. Its methods must not be called after the test has
// finished.
type Postgres struct {
	// URL is a pgx/libpq connection URL:
	// postgres://postgres@127.0.0.1:<Port>/postgres?sslmode=disable.
	URL string
	// Port is the TCP port, the same across Restart.
	Port int
	// DataDir is the cluster's data directory, the same across Restart.
	DataDir string

	durable bool
	proc    *proc
}

// PostgresOptions adjusts StartPostgresWith.
type PostgresOptions struct {
	// Durable keeps fsync on, as in production: commits wait for the disk.
	// Benchmarks that compare PostgreSQL with durable backends need it;
	// tests run faster without.
	Durable bool
	// Env is added to the server's environment (e.g. libfaketime's
	// LD_PRELOAD and FAKETIME_* to shift its clock). initdb does not get it.
	Env []string
}

// StartPostgres creates a cluster with initdb (trust authentication,
// superuser PostgresUser, UTF8, C locale) in a new temporary directory, runs
// `postgres -D <dir>` listening only on 127.0.0.1 at a free port (no Unix
// socket), and returns once `SELECT 1` succeeds through pgx. fsync is off (see StartPostgresWith):
// committed data survives Kill and Restart (the page cache is not lost when
// processes die), only not a machine crash.
//
// PostgreSQL refuses to run as root; when the test runs as root the
// binaries run as the "postgres" user (or "nobody" if there is none) in a
// directory owned by that user under os.TempDir().
//
// It skips (or under CI=true fails) the test if the binaries are not
// installed (Debian package "postgresql"), and fails the test with the tail
// of the server log if the server does not become ready within 30 seconds.
func StartPostgres(t testing.TB) *Postgres {
	t.Helper()
	return startPostgres(t, freePorts, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with options.
func StartPostgresWith(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	return startPostgres(t, freePorts, opts)
}

func startPostgres(t testing.TB, pick portPicker, opts PostgresOptions) *Postgres {
	t.Helper()
	binDir := PostgresBinDir(t)
	cred, err := unprivilegedUser()
	if err != nil {
		t.Fatalf("%v", err)
	}

	base, err := os.MkdirTemp("", "testenv-pg-")
	if err != nil {
		t.Fatalf("testenv: StartPostgres: %v", err)
	}
	var env []string
	if len(opts.Env) > 0 {
		env = append(os.Environ(), opts.Env...)
	}
	p := &Postgres{
		durable: opts.Durable,
		DataDir: filepath.Join(base, "data"),
		proc: &proc{
			t:       t,
			path:    filepath.Join(binDir, "postgres"),
			dir:     base,
			cred:    cred,
			env:     env,
			stopSig: syscall.SIGINT, // "fast" shutdown: does not wait for clients to disconnect
		},
	}
	t.Cleanup(func() {
		p.proc.stop()
		os.RemoveAll(base)
	})
	if cred != nil {
		if err := os.Chown(base, int(cred.Uid), int(cred.Gid)); err != nil {
			t.Fatalf("testenv: StartPostgres: %v", err)
		}
	}

	initdb := exec.Command(filepath.Join(binDir, "initdb"),
		"-D", p.DataDir,
		"-U", PostgresUser,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync",
		"--no-instructions",
	)
	initdb.Dir = base
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		t.Fatalf("testenv: StartPostgres: initdb: %v\n%s", err, out)
	}

	err = retryPorts(1, pick, func(ports []int, _ int) error {
		p.setPort(ports[0])
		if err := p.proc.start(); err != nil {
			return err
		}
		if err := p.proc.waitReady(time.Now().Add(readyTimeout), p.ping); err != nil {
			p.proc.stop()
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("testenv: StartPostgres: %v", err)
	}
	return p
}

func (p *Postgres) setPort(port int) {
	p.Port = port
	p.URL = fmt.Sprintf("postgres://%s@127.0.0.1:%d/%s?sslmode=disable", PostgresUser, port, PostgresDatabase)
	p.proc.name = fmt.Sprintf("postgres[127.0.0.1:%d]", port)
	p.proc.ports = []int{port}
	p.proc.args = []string{
		"-D", p.DataDir,
		"-c", "listen_addresses=127.0.0.1",
		"-c", "port=" + strconv.Itoa(port),
		"-c", "unix_socket_directories=",
	}
	if !p.durable {
		p.proc.args = append(p.proc.args, "-c", "fsync=off")
	}
}

// ping connects with pgx and runs SELECT 1.
func (p *Postgres) ping() error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, p.URL)
	if err != nil {
		return err
	}
	defer conn.Close(context.Background())
	var one int
	return conn.QueryRow(ctx, "SELECT 1").Scan(&one)
}

// PID returns the process ID of the running postmaster (which is also the
// process group of all its backends), or 0 if it is not running.
func (p *Postgres) PID() int { return p.proc.pid() }

// Stop shuts the server down: SIGCONT if paused, SIGINT (fast shutdown:
// client connections are terminated), and SIGKILL to the whole process group
// if it has not exited after 10 seconds. It returns once the postmaster is
// reaped; no backend is left. Stopping a server that is not running does
// nothing.
func (p *Postgres) Stop() { p.proc.stop() }

// Kill sends SIGKILL to the postmaster and all its backends and returns once
// the postmaster is reaped. The next Restart performs crash recovery.
// Killing a server that is not running does nothing.
func (p *Postgres) Kill() { p.proc.kill() }

// Restart starts the server again with the same data directory and port
// (stopping it first if it is still running) and returns once `SELECT 1`
// succeeds; the test fails if it does not. Committed data is kept.
func (p *Postgres) Restart() {
	p.proc.t.Helper()
	p.proc.restart("Postgres.Restart", p.ping)
}

// Pause freezes the postmaster and all its backends with SIGSTOP: no query
// on an existing connection is answered and no new connection is
// established until Resume.
func (p *Postgres) Pause() { p.proc.pause() }

// Resume continues a paused server with SIGCONT. Pausing or resuming a server
// that is not running marks the test failed (t.Errorf).
func (p *Postgres) Resume() { p.proc.resume() }
