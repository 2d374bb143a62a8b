package servers

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
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
// so its PID is ours) with a fresh data directory. Close stops it and
// removes its data directory.
type Postgres struct {
	// URL is a pgx/libpq connection URL:
	// postgres://postgres@127.0.0.1:<Port>/postgres?sslmode=disable.
	URL string
	// Port is the TCP port, the same across Restart.
	Port int
	// DataDir is the cluster's data directory, the same across Restart.
	DataDir string

	base    string // removed by Close; holds DataDir
	durable bool
	proc    *proc
}

// PostgresOptions adjusts StartPostgres.
type PostgresOptions struct {
	// Durable keeps fsync on, as in production: commits wait for the disk.
	// Benchmarks that compare PostgreSQL with durable backends need it;
	// tests run faster without.
	Durable bool
	// Env is added to the server's environment (e.g. libfaketime's
	// LD_PRELOAD and FAKETIME_* to shift its clock). initdb does not get it.
	Env []string
	// BinDir holds initdb and postgres; empty: PostgresBinDir("").
	BinDir string
	// Log receives the server's output; nil discards it.
	Log Logger

	pick portPicker // nil: freePorts; tests of the retry path set it
}

// StartPostgres creates a cluster with initdb (trust authentication,
// superuser PostgresUser, UTF8, C locale) in a new temporary directory, runs
// `postgres -D <dir>` listening only on 127.0.0.1 at a free port (no Unix
// socket), and returns once `SELECT 1` succeeds through pgx. Unless
// opts.Durable, fsync is off: committed data survives Kill and Restart (the
// page cache is not lost when processes die), only not a machine crash.
//
// PostgreSQL refuses to run as root; when we run as root the binaries run
// as the "postgres" user (or "nobody" if there is none) in a directory
// owned by that user under os.TempDir().
//
// It fails with a *MissingError (ErrNotInstalled) if the binaries are not
// installed (Debian package "postgresql"), and with the tail of the server
// log if the server does not become ready within readyTimeout (or ctx
// ends). On error nothing is left running.
func StartPostgres(ctx context.Context, opts PostgresOptions) (*Postgres, error) {
	if opts.BinDir == "" {
		dir, err := PostgresBinDir("")
		if err != nil {
			return nil, err
		}
		opts.BinDir = dir
	}
	if opts.pick == nil {
		opts.pick = freePorts
	}
	cred, err := unprivilegedUser()
	if err != nil {
		return nil, err
	}
	base, err := os.MkdirTemp("", "lockgate-pg-")
	if err != nil {
		return nil, fmt.Errorf("servers: StartPostgres: %w", err)
	}
	var env []string
	if len(opts.Env) > 0 {
		env = append(os.Environ(), opts.Env...)
	}
	p := &Postgres{
		base:    base,
		durable: opts.Durable,
		DataDir: filepath.Join(base, "data"),
		proc: &proc{
			log:     opts.Log,
			path:    filepath.Join(opts.BinDir, "postgres"),
			dir:     base,
			cred:    cred,
			env:     env,
			stopSig: syscall.SIGINT, // "fast" shutdown: does not wait for clients to disconnect
		},
	}
	if err := p.start(ctx, opts, cred); err != nil {
		p.Close()
		return nil, fmt.Errorf("servers: StartPostgres: %w", err)
	}
	return p, nil
}

// start runs initdb and then the server, retrying with new ports.
func (p *Postgres) start(ctx context.Context, opts PostgresOptions, cred *syscall.Credential) error {
	if cred != nil {
		if err := os.Chown(p.base, int(cred.Uid), int(cred.Gid)); err != nil {
			return err
		}
	}
	initdb := exec.CommandContext(ctx, filepath.Join(opts.BinDir, "initdb"),
		"-D", p.DataDir,
		"-U", PostgresUser,
		"--auth=trust",
		"--encoding=UTF8",
		"--locale=C",
		"--no-sync",
		"--no-instructions",
	)
	initdb.Dir = p.base
	initdb.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGKILL}
	if out, err := initdb.CombinedOutput(); err != nil {
		return fmt.Errorf("initdb: %w\n%s", err, out)
	}
	return retryPorts(1, opts.pick, func(ports []int, _ int) error {
		p.setPort(ports[0])
		if err := p.proc.start(); err != nil {
			return err
		}
		if err := waitAll(ctx, time.Now().Add(readyTimeout), []*proc{p.proc}, []func() error{p.ping}); err != nil {
			p.proc.stop()
			return err
		}
		return nil
	})
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

// Close stops the server (see Stop) and removes its data directory.
func (p *Postgres) Close() {
	p.proc.stop()
	os.RemoveAll(p.base)
}

// PID returns the process ID of the running postmaster (which is also the
// process group of all its backends), or 0 if it is not running.
func (p *Postgres) PID() int { return p.proc.pid() }

// Stop shuts the server down: SIGCONT if paused, SIGINT (fast shutdown:
// client connections are terminated), and SIGKILL to the whole process group
// if it has not exited after stopTimeout. It returns once the postmaster is
// reaped; no backend is left. Stopping a server that is not running does
// nothing.
func (p *Postgres) Stop() { p.proc.stop() }

// Kill sends SIGKILL to the postmaster and all its backends and returns once
// the postmaster is reaped. The next Restart performs crash recovery.
// Killing a server that is not running does nothing.
func (p *Postgres) Kill() { p.proc.kill() }

// Restart starts the server again with the same data directory and port
// (stopping it first if it is still running) and returns once `SELECT 1`
// succeeds. Committed data is kept.
func (p *Postgres) Restart() error { return p.proc.restart("Postgres.Restart", p.ping) }

// Pause freezes the postmaster and all its backends with SIGSTOP: no query
// on an existing connection is answered and no new connection is
// established until Resume. It fails with ErrNotRunning if the server is
// not running.
func (p *Postgres) Pause() error { return p.proc.pause() }

// Resume continues a paused server with SIGCONT. It fails with
// ErrNotRunning if the server is not running.
func (p *Postgres) Resume() error { return p.proc.resume() }
