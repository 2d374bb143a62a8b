// Package servers starts and stops real server processes — redis-server,
// PostgreSQL, etcd, ZooKeeper and `lockgate node` — on free 127.0.0.1 ports, and offers
// the fault-injection primitives that tests and `lockgate-bench` need:
// Pause/Resume (SIGSTOP/SIGCONT), Kill (SIGKILL), Stop (graceful, with a
// SIGKILL fallback) and Restart on the same ports and data.
//
// Every function returns an error instead of failing a test, so the package
// links into the lockgate binary without the testing package (a production
// binary should not carry its proving ground). internal/testenv wraps it for
// tests: it takes a *testing.T, registers the cleanup, and skips or fails on
// a missing binary.
//
// Every server is started in its own process group with a parent-death
// signal of SIGKILL, so it dies with the process that started it even when
// no Close runs; its output goes, one line per call, to the Logger it was
// started with. Close returns only after the process is reaped and its
// output drained, so nothing is logged after Close.
//
// The binaries are Debian's: redis-server (package redis-server), etcd
// (package etcd-server, v3.4 flags), ZooKeeper 3.8 (package zookeeper, on
// the JVM) and PostgreSQL under
// /usr/lib/postgresql/*/bin (package postgresql). A missing one is reported
// as a *MissingError, which matches ErrNotInstalled.
//
// The package is Linux-only: it relies on process groups, Pdeathsig and /proc.
package servers

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

var (
	// ErrNotInstalled: a server binary (or library) is not installed. The
	// error that wraps it is a *MissingError naming the Debian package.
	ErrNotInstalled = errors.New("servers: not installed")
	// ErrNotRunning: a fault (Pause, Resume) was asked of a server whose
	// process is not running.
	ErrNotRunning = errors.New("servers: process is not running")
)

// MissingError reports that What is not installed; Package is the Debian
// package that provides it.
type MissingError struct {
	What, Package string
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("%s not found; install the Debian package %q (apt-get install -y %s)",
		e.What, e.Package, e.Package)
}

// Is makes a MissingError match ErrNotInstalled.
func (e *MissingError) Is(target error) bool { return target == ErrNotInstalled }

// Logger receives a server's output, one line per call, from the
// goroutine that reads it: several servers log concurrently. A
// *testing.T is a Logger.
type Logger interface {
	Logf(format string, args ...any)
}

// logf logs to l unless it is nil.
func logf(l Logger, format string, args ...any) {
	if l != nil {
		l.Logf(format, args...)
	}
}

// WriterLogger returns a Logger that writes each line, newline-terminated,
// to w, one line at a time: the servers' output readers write concurrently
// and w need not be safe for concurrent use. A nil w discards.
func WriterLogger(w io.Writer) Logger {
	if w == nil {
		return nil
	}
	return &writerLogger{w: w}
}

type writerLogger struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *writerLogger) Logf(format string, args ...any) {
	s := fmt.Sprintf(format, args...)
	if !strings.HasSuffix(s, "\n") {
		s += "\n"
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	io.WriteString(l.w, s)
}

// LookBinary returns the absolute path of the executable name, looked up in
// $PATH and then in /usr/sbin, /usr/bin, /sbin and /usr/local/bin, or a
// *MissingError naming debianPackage.
func LookBinary(name, debianPackage string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs, nil
		}
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/usr/bin", "/sbin", "/usr/local/bin"} {
		p := filepath.Join(dir, name)
		if isExecutable(p) {
			return p, nil
		}
	}
	return "", &MissingError{What: name, Package: debianPackage}
}

func isExecutable(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// PostgresRoot is where Debian installs the PostgreSQL server binaries.
const PostgresRoot = "/usr/lib/postgresql"

// PostgresBinDir returns the newest root/<version>/bin that contains
// executable initdb and postgres, or a *MissingError naming the Debian
// package "postgresql". An empty root means PostgresRoot.
func PostgresBinDir(root string) (string, error) {
	if root == "" {
		root = PostgresRoot
	}
	entries, err := os.ReadDir(root)
	if err == nil {
		var versions []string
		for _, e := range entries {
			versions = append(versions, e.Name())
		}
		// Newest first, comparing dotted numbers numerically (15 > 9.6).
		sort.Slice(versions, func(i, j int) bool { return versionLess(versions[j], versions[i]) })
		for _, v := range versions {
			bin := filepath.Join(root, v, "bin")
			if isExecutable(filepath.Join(bin, "initdb")) && isExecutable(filepath.Join(bin, "postgres")) {
				return bin, nil
			}
		}
	}
	return "", &MissingError{What: "PostgreSQL server binaries (initdb, postgres) under " + root + "/*/bin", Package: "postgresql"}
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
			return nil, fmt.Errorf("servers: finding a free port: %w", err)
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
	return nil, fmt.Errorf("servers: running as root but found no unprivileged user (postgres, nobody) to run PostgreSQL as: %w", lastErr)
}

// Descendants lists every descendant of process pid, read from /proc:
// PostgreSQL's backends leave the process group, so tests that check a
// server tree died look them up here.
func Descendants(pid int) []int { return descendants(pid) }

// ProcState returns the state letter of process pid from /proc/<pid>/stat
// ('R', 'S', 'T' stopped, 'Z' zombie, ...), and false when there is no such
// process.
func ProcState(pid int) (byte, bool) {
	st, ok := procStat(pid)
	return st.state, ok
}
