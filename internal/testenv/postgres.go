package testenv

import (
	"context"
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

const (
	// PostgresUser is the superuser created by initdb; it authenticates
	// with trust (no password) over TCP from 127.0.0.1.
	PostgresUser = servers.PostgresUser
	// PostgresDatabase is the database named in Postgres.URL.
	PostgresDatabase = servers.PostgresDatabase
)

// Postgres is a PostgreSQL server (postmaster running in the foreground,
// so its PID is ours) with a fresh data directory, owned by a test: a
// servers.Postgres whose faults fail the test instead of returning errors.
// It is stopped, and its data directory removed, by a t.Cleanup registered
// by StartPostgres. Its methods must not be called after the test has
// finished.
type Postgres struct {
	*servers.Postgres
	t testing.TB
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
	return StartPostgresWith(t, PostgresOptions{})
}

// StartPostgresWith is StartPostgres with options.
func StartPostgresWith(t testing.TB, opts PostgresOptions) *Postgres {
	t.Helper()
	binDir := PostgresBinDir(t)
	p, err := servers.StartPostgres(context.Background(), servers.PostgresOptions{
		Durable: opts.Durable,
		Env:     opts.Env,
		BinDir:  binDir,
		Log:     t,
	})
	if err != nil {
		failStart(t, "StartPostgres", err)
	}
	t.Cleanup(p.Close)
	return &Postgres{Postgres: p, t: t}
}

// Restart starts the server again with the same data directory and port
// (stopping it first if it is still running) and returns once `SELECT 1`
// succeeds; the test fails if it does not. Committed data is kept.
func (p *Postgres) Restart() {
	p.t.Helper()
	if err := p.Postgres.Restart(); err != nil {
		p.t.Fatalf("testenv: %v", err)
	}
}

// Pause freezes the postmaster and all its backends with SIGSTOP: no query
// on an existing connection is answered and no new connection is
// established until Resume.
func (p *Postgres) Pause() { p.t.Helper(); errorf(p.t, p.Postgres.Pause()) }

// Resume continues a paused server with SIGCONT. Pausing or resuming a server
// that is not running marks the test failed (t.Errorf).
func (p *Postgres) Resume() { p.t.Helper(); errorf(p.t, p.Postgres.Resume()) }
