package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/internal/netguard"
)

// startGuarded starts a one-node raftlock server the way `lockgate node`
// does (raftlock.StartServer with the connection limits lim, the gateway
// with opts mounted on its API mux) and returns its API address. It mounts
// the gateway by hand rather than through gateway/raftgw, which imports
// this package; the limits under test are the server's, not the adapter's.
func startGuarded(t testing.TB, lim netguard.Limits, opts Options) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 1, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 400*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
		cfg.HTTPLimits = lim
	})
	if err != nil {
		t.Fatal(err)
	}
	g := New(c.Servers[0].Node, opts)
	c.Servers[0].Mux.Handle("/", g)
	t.Cleanup(func() { g.Close(); c.Shutdown() })
	return c.Servers[0].APIAddr()
}

// startRaft starts a three-node raftlock cluster with a gateway mounted on
// every node's API mux, by hand for the reason startGuarded gives. (The
// adapter's own tests, redirects, readiness and metrics, are in
// gateway/raftgw.)
func startRaft(t testing.TB) *raftlock.LocalCluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout, cfg.ElectionTimeout, cfg.LeaderLeaseTimeout = 400*time.Millisecond, 400*time.Millisecond, 200*time.Millisecond
		cfg.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range c.Servers {
		s.Mux.Handle("/", New(s.Node, Options{}))
	}
	t.Cleanup(c.Shutdown)
	return c
}

// raiseFDLimit makes room for n more descriptors or skips the test.
func raiseFDLimit(t *testing.T, n uint64) {
	t.Helper()
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skipf("cannot read the descriptor limit: %v", err)
	}
	if rl.Cur >= n {
		return
	}
	if rl.Max < n {
		t.Skipf("needs %d file descriptors; the hard limit (ulimit -Hn) is %d", n, rl.Max)
	}
	old := rl
	rl.Cur = n
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil {
		t.Skipf("needs %d file descriptors; raising the soft limit from %d failed: %v", n, old.Cur, err)
	}
	t.Cleanup(func() { syscall.Setrlimit(syscall.RLIMIT_NOFILE, &old) })
}

// awaitClosed reads c until the server closes it: EOF or a reset passes,
// the deadline (the server kept it open) fails.
func awaitClosed(r io.Reader, c net.Conn, deadline time.Time) error {
	c.SetReadDeadline(deadline)
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("connection %s still open: %w", c.LocalAddr(), err)
	}
	return nil
}

// TestIdleConnectionsClosed: 1,000 connections that cost the server a
// descriptor each and then go quiet — half never send a byte, half send
// one request and idle on keep-alive — are all closed by the server
// (they once stayed open with no idle timeout).
func TestIdleConnectionsClosed(t *testing.T) {
	const conns = 1000
	raiseFDLimit(t, 3*conns+512) // client and server ends, and the node's own
	addr := startGuarded(t, netguard.Limits{ReadHeaderTimeout: 500 * time.Millisecond, IdleTimeout: 500 * time.Millisecond}, Options{})

	// Generous: a broken server keeps them open for good; a working one
	// closes the last within about a second of opening it.
	deadline := time.Now().Add(60 * time.Second)
	var wg sync.WaitGroup
	var open atomic.Int64
	errs := make(chan error, conns)
	for i := range conns {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatalf("dial %d: %v", i, err)
		}
		defer c.Close()
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := bufio.NewReader(c)
			if i%2 == 1 {
				fmt.Fprintf(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
				resp, err := http.ReadResponse(r, nil)
				if err != nil {
					errs <- fmt.Errorf("healthz on connection %d: %w", i, err)
					return
				}
				io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				if resp.StatusCode != http.StatusOK || resp.Close {
					errs <- fmt.Errorf("healthz on connection %d: %s (close %v), want a kept-alive 200", i, resp.Status, resp.Close)
					return
				}
			}
			if err := awaitClosed(r, c, deadline); err != nil {
				open.Add(1)
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
		break
	}
	if n := open.Load(); n > 0 {
		t.Fatalf("%d of %d idle connections were still open after 60 s", n, conns)
	}
}

// TestIdleUnauthorizedClosed: a request refused 401 ends its connection
// with the answer; it does not idle until a timeout.
func TestIdleUnauthorizedClosed(t *testing.T) {
	toks, err := NewTokens(goodToken)
	if err != nil {
		t.Fatal(err)
	}
	addr := startGuarded(t, netguard.Limits{}, Options{Tokens: toks}) // default timeouts: a minute idle
	for _, path := range []string{"/locks/x", "/v1/ws", "/metrics"} {
		c, err := net.DialTimeout("tcp", addr, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", path)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		if resp.StatusCode != http.StatusUnauthorized || !resp.Close {
			t.Fatalf("GET %s without a token: %s, Connection: %q; want 401 and close", path, resp.Status, resp.Header.Get("Connection"))
		}
		// Far below the idle timeout: only a close after the 401 passes.
		if err := awaitClosed(r, c, time.Now().Add(10*time.Second)); err != nil {
			t.Fatalf("after the 401 on %s: %v", path, err)
		}
	}
}

// TestIdleSlowBody: an authenticated REST request whose body trickles in
// a byte a second is cut off at the read timeout; the handler answers and
// returns instead of waiting for the rest (once over 30 s).
func TestIdleSlowBody(t *testing.T) {
	toks, err := NewTokens(goodToken)
	if err != nil {
		t.Fatal(err)
	}
	addr := startGuarded(t, netguard.Limits{ReadTimeout: time.Second}, Options{Tokens: toks})
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const bodyLen = 1000 // 1,000 s at the trickle's pace
	fmt.Fprintf(c, "POST /locks/slow HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\n"+
		"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n", goodToken, bodyLen)
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for range bodyLen {
			if _, err := c.Write([]byte(" ")); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		t.Fatalf("no answer while the body trickles: %v (the handler is held)", err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(string(b), "bad_json") {
		t.Fatalf("slow body: %s %s, want 400 bad_json (the body read timed out)", resp.Status, b)
	}
}

// TestIdleWebSocketOutlivesTimeouts: the server's read and write timeouts
// bound HTTP requests, not a WebSocket session. A session held (with the
// gateway's pings answered) for several times both timeouts still reads
// requests and writes answers.
func TestIdleWebSocketOutlivesTimeouts(t *testing.T) {
	const timeout = 300 * time.Millisecond
	toks, err := NewTokens(goodToken)
	if err != nil {
		t.Fatal(err)
	}
	addr := startGuarded(t, netguard.Limits{ReadTimeout: timeout, WriteTimeout: timeout, IdleTimeout: timeout},
		Options{Tokens: toks, PingInterval: timeout / 3})
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws", http.Header{"Authorization": {"Bearer " + goodToken}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	start := time.Now()
	held := make(chan struct{})
	var once sync.Once
	ws.SetPingHandler(func(data string) error {
		if time.Since(start) > 4*timeout {
			once.Do(func() { close(held) })
		}
		return ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(5*time.Second))
	})
	msgs := make(chan []byte, 1)
	go func() {
		for {
			_, m, err := ws.ReadMessage()
			if err != nil {
				close(msgs)
				return
			}
			msgs <- m
		}
	}()
	select {
	case <-held:
	case _, ok := <-msgs:
		t.Fatalf("the session ended or spoke unasked while held (open: %v)", ok)
	case <-time.After(30 * time.Second):
		t.Fatal("no ping from the gateway after 4× the server timeouts")
	}
	if err := ws.WriteJSON(map[string]any{"id": "a", "commandType": 5, "key": "k", "ttl": 5000}); err != nil {
		t.Fatalf("write after %v: %v", time.Since(start), err)
	}
	select {
	case m, ok := <-msgs:
		if !ok || !strings.Contains(string(m), `"grant"`) {
			t.Fatalf("after %v: %q (open: %v), want a grant", time.Since(start), m, ok)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no answer to the acquire")
	}
}
