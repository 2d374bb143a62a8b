// Package testenv starts real server processes (Redis, PostgreSQL, etcd,
// ZooKeeper, `lockgate node`) for the tests of lockgate's lock backends, and offers the
// fault-injection hooks those tests need: Pause/Resume (SIGSTOP/SIGCONT),
// Kill (SIGKILL), Stop (graceful, with a SIGKILL fallback) and Restart on
// the same port and data.
//
// It is a thin layer over internal/servers, which does the process
// management and returns errors (so that `lockgate-bench` can use it without
// linking the testing package). testenv adds what a test wants: the server
// logs its output to t.Log prefixed with its name, is stopped by a t.Cleanup
// registered when it is started (the cleanup returns only after the process
// is reaped and its output drained, so nothing is logged after the test
// ends), and a failure to start fails the test.
//
// The binaries are Debian's: redis-server (package redis-server), etcd
// (package etcd-server, v3.4 flags), ZooKeeper 3.8 (package zookeeper) and
// PostgreSQL under
// /usr/lib/postgresql/*/bin (package postgresql). When one is missing the
// test is skipped, or fails when the environment variable CI is "true", with
// a message naming the package to install.
//
// The package is Linux-only: it relies on process groups, Pdeathsig and /proc.
package testenv

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/lockgate/lockgate/internal/servers"
)

// RequireBinary returns the absolute path of the executable name, looked up
// in $PATH and then in /usr/sbin, /usr/bin, /sbin and /usr/local/bin. If it
// is not found, the test is skipped with a message naming debianPackage as
// the package to install; when the environment variable CI equals "true" the
// test fails (t.Fatalf) with the same message instead, so that CI cannot go
// green by skipping.
func RequireBinary(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, err := servers.LookBinary(name, debianPackage)
	if err != nil {
		missing(t, name, debianPackage)
	}
	return path
}

// missing applies the missing-binary policy: t.Fatalf under CI=true,
// t.Skipf otherwise, both naming the Debian package.
func missing(t testing.TB, what, debianPackage string) {
	t.Helper()
	msg := fmt.Sprintf("testenv: %s not found; install the Debian package %q (apt-get install -y %s)",
		what, debianPackage, debianPackage)
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s [CI=true: failing instead of skipping]", msg)
		return
	}
	t.Skipf("%s", msg)
}

// failStart fails the test because a server did not start: through the
// missing-binary policy when err says something is not installed, with
// t.Fatalf otherwise.
func failStart(t testing.TB, what string, err error) {
	t.Helper()
	var m *servers.MissingError
	if errors.As(err, &m) {
		missing(t, m.What, m.Package)
		return
	}
	t.Fatalf("testenv: %s: %v", what, err)
}

// PostgresBinDir returns the newest /usr/lib/postgresql/<version>/bin that
// contains executable initdb and postgres. If there is none, the test is
// skipped (or fails under CI=true) naming the Debian package "postgresql".
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	return postgresBinDir(t, servers.PostgresRoot)
}

// postgresBinDir is PostgresBinDir looking under root.
func postgresBinDir(t testing.TB, root string) string {
	t.Helper()
	dir, err := servers.PostgresBinDir(root)
	if err != nil {
		failStart(t, "PostgresBinDir", err)
	}
	return dir
}
