package cli

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
)

// TestLimitsFlags: the connection-limit flags reach the HTTP server of
// `node`, `serve` and `store`: a third connection from one IP with
// --max-conns-per-ip 2 is closed at once, idle keep-alive connections are
// closed after --idle-timeout, and their places are free again.
func TestLimitsFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockgate")
	}
	bin := testenv.BuildLockgate(t)
	// The header and read timeouts are long, so that only a refusal or
	// the idle timeout can close a connection within the test's waits.
	limits := []string{"--max-conns-per-ip", "2", "--idle-timeout", "300ms", "--read-header-timeout", "1m", "--read-timeout", "1m"}
	for _, tc := range []struct {
		name  string
		start func(t *testing.T) string
	}{
		{"node", func(t *testing.T) string {
			api := freeAddr(t)
			startProcess(t, bin, "raftlock node 1:", append([]string{"node", "--id", "1", "--bootstrap",
				"--data-dir", filepath.Join(t.TempDir(), "node-1"), "--raft-addr", freeAddr(t), "--api-addr", api}, limits...)...)
			return api
		}},
		{"serve", func(t *testing.T) string {
			return startServe(t, bin, append([]string{"serve", "--nodes", "1", "--listen", "127.0.0.1:0"}, limits...))
		}},
		{"store", func(t *testing.T) string {
			rest := startProcess(t, bin, "fenced store listening on http://", append([]string{"store", "--listen", "127.0.0.1:0",
				"--data", filepath.Join(t.TempDir(), "store.log")}, limits...)...)
			return strings.Fields(rest)[0]
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			addr := tc.start(t)
			c1, c2 := dialRaw(t, addr), dialRaw(t, addr)
			expectRefused(t, addr, "the third connection from one IP")
			for _, c := range []*rawConn{c1, c2} {
				c.healthz(t)
				expectClosed(t, c, "an idle keep-alive connection")
			}
			dialRaw(t, addr).healthz(t) // the places are free again
		})
	}
}

type rawConn struct {
	net.Conn
	r *bufio.Reader
}

func dialRaw(t *testing.T, addr string) *rawConn {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &rawConn{Conn: c, r: bufio.NewReader(c)}
}

// healthz asks GET /healthz on c, keeping the connection alive.
func (c *rawConn) healthz(t *testing.T) {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	resp, err := http.ReadResponse(c.r, nil)
	if err != nil {
		t.Fatalf("GET /healthz: %v", err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz: %s", resp.Status)
	}
}

// expectRefused dials addr and expects the server to close the connection
// at once (the reset may beat the dial's return).
func expectRefused(t *testing.T, addr, what string) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	expectClosed(t, &rawConn{Conn: c, r: bufio.NewReader(c)}, what)
}

// expectClosed waits (10 s at most, far below the header timeout) for
// the server to close c.
func expectClosed(t *testing.T, c *rawConn, what string) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err := io.Copy(io.Discard, c.r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("%s is still open after 10 s", what)
	}
}
