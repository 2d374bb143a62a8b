package netguard

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"testing"
	"time"
)

// TestLimitsCloseRefused: a server from NewServer closes the connection
// after a 401 or 403 answer and keeps it alive after others; the wrapped
// writer still hijacks (WebSocket upgrades) and flushes.
func TestLimitsCloseRefused(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/hijack":
			c, brw, err := http.NewResponseController(w).Hijack()
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			brw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 8\r\nConnection: close\r\n\r\nhijacked")
			brw.Flush()
			c.Close()
		case "/flush":
			w.Write([]byte("flushed"))
			if _, ok := w.(http.Flusher); !ok {
				panic("not a Flusher")
			}
			w.(http.Flusher).Flush()
		default:
			code, _ := strconv.Atoi(r.URL.Path[1:])
			w.WriteHeader(code)
		}
	})
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := NewServer(h, Limits{}, nil)
	go srv.Serve(Listen(inner, Limits{}, nil))
	t.Cleanup(func() { srv.Close() })

	for _, tc := range []struct {
		path    string
		closed  bool
		content string
	}{
		{"/200", false, ""}, {"/404", false, ""}, {"/401", true, ""}, {"/403", true, ""},
		{"/flush", false, "flushed"}, {"/hijack", true, "hijacked"},
	} {
		c, err := net.DialTimeout("tcp", inner.Addr().String(), 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(10 * time.Second))
		fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: x\r\n\r\n", tc.path)
		r := bufio.NewReader(c)
		resp, err := http.ReadResponse(r, nil)
		if err != nil {
			t.Fatalf("GET %s: %v", tc.path, err)
		}
		b, _ := io.ReadAll(resp.Body)
		if resp.Close != tc.closed || string(b) != tc.content {
			t.Fatalf("GET %s: %s close=%v body %q; want close=%v body %q", tc.path, resp.Status, resp.Close, b, tc.closed, tc.content)
		}
		if tc.closed {
			// The server closes: the next read is EOF, long before the
			// default idle timeout (a minute).
			if _, err := r.ReadByte(); err != io.EOF {
				t.Fatalf("GET %s: after the answer, read %v, want EOF", tc.path, err)
			}
		}
	}
}
