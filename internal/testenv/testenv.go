// Package testenv starts real server processes (Redis, PostgreSQL, etcd) for
// the tests of lockgate's lock backends, and offers the fault-injection hooks
// those tests need: Pause/Resume (SIGSTOP/SIGCONT), Kill (SIGKILL), Stop
// (graceful, with a SIGKILL fallback) and Restart on the same port and data.
//
// Every server binds to 127.0.0.1 on free ports, is started in its own
// process group with a parent-death signal of SIGKILL, logs its output to
// t.Log prefixed with its name, and is stopped by a t.Cleanup registered when
// it is started; the cleanup returns only after the process is reaped and its
// output drained, so nothing is logged after the test ends.
//
// The binaries are Debian's: redis-server (package redis-server), etcd
// (package etcd-server, v3.4 flags) and PostgreSQL under
// /usr/lib/postgresql/*/bin (package postgresql). When one is missing the
// test is skipped, or fails when the environment variable CI is "true", with
// a message naming the package to install.
//
// The package is Linux-only: it relies on process groups, Pdeathsig and /proc.
package testenv

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// RequireBinary returns the absolute path of the executable name, looked up
// in $PATH and then in /usr/sbin, /usr/bin, /sbin and /usr/local/bin. If it
// is not found, the test is skipped with a message naming debianPackage as
// the package to install; when the environment variable CI equals "true" the
// test fails (t.Fatalf) with the same message instead, so that CI cannot go
// green by skipping.
func RequireBinary(t testing.TB, name, debianPackage string) string {
	t.Helper()
	path, ok := lookBinary(name)
	if !ok {
		missing(t, name, debianPackage)
	}
	return path
}

// lookBinary finds an executable by name.
func lookBinary(name string) (string, bool) {
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, true
		}
		return p, true
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, true
		}
	}
	return "", false
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
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

// postgresRoot is where Debian installs the PostgreSQL server binaries.
const postgresRoot = "/usr/lib/postgresql"

// PostgresBinDir returns the newest /usr/lib/postgresql/<version>/bin that
// contains executable initdb and postgres. If there is none, the test is
// skipped (or fails under CI=true) naming the Debian package "postgresql".
func PostgresBinDir(t testing.TB) string {
	t.Helper()
	return postgresBinDir(t, postgresRoot)
}

// postgresBinDir is PostgresBinDir looking under root.
func postgresBinDir(t testing.TB, root string) string {
	t.Helper()
	dir, ok := findPostgresBinDir(root)
	if !ok {
		missing(t, "PostgreSQL server binaries (initdb, postgres) under "+root+"/*/bin", "postgresql")
	}
	return dir
}

// findPostgresBinDir returns root/<newest version>/bin holding initdb and
// postgres.
func findPostgresBinDir(root string) (string, bool) {
	entries, err := os.ReadDir(root)
	if err != nil {
		return "", false
	}
	var versions []string
	for _, e := range entries {
		versions = append(versions, e.Name())
	}
	// Newest first, comparing dotted numbers numerically (15 > 9.6).
	sort.Slice(versions, func(i, j int) bool { return versionLess(versions[j], versions[i]) })
	for _, v := range versions {
		bin := filepath.Join(root, v, "bin")
		if isExecutable(filepath.Join(bin, "initdb")) && isExecutable(filepath.Join(bin, "postgres")) {
			return bin, true
		}
	}
	return "", false
}

// versionLess compares dotted version strings numerically; non-numeric
// parts compare as strings.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		ai, aerr := strconv.Atoi(as[i])
		bi, berr := strconv.Atoi(bs[i])
		if aerr == nil && berr == nil {
			if ai != bi {
				return ai < bi
			}
			continue
		}
		if as[i] != bs[i] {
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}

// freePorts returns n distinct TCP ports that were free on 127.0.0.1 a
// moment ago. All n listeners are held open together so the ports are
// distinct; another process may still grab one before the server binds it,
// which the Start functions handle by retrying with new ports.
func freePorts(n int) ([]int, error) {
	ports := make([]int, 0, n)
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("testenv: finding a free port: %w", err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

// unprivilegedUser returns the credential to run PostgreSQL as when we are
// root (initdb and postgres refuse to run as root): the "postgres" user if
// it exists, else "nobody". It returns nil when not running as root.
func unprivilegedUser() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	var lastErr error
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			lastErr = err
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil {
			lastErr = fmt.Errorf("user %s has non-numeric uid/gid %s/%s", name, u.Uid, u.Gid)
			continue
		}
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return nil, fmt.Errorf("testenv: running as root but found no unprivileged user (postgres, nobody) to run PostgreSQL as: %v", lastErr)
}
