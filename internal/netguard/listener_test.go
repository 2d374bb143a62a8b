package netguard

import (
	"errors"
	"log/slog"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// acceptAll accepts on ln until it closes and hands every server-side
// connection to the test.
func acceptAll(t *testing.T, ln net.Listener) <-chan net.Conn {
	t.Helper()
	ch := make(chan net.Conn, 64)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				close(ch)
				return
			}
			ch <- c
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ch
}

// dialFrom connects to addr from the loopback address src (127.0.0.x: a
// distinct remote IP as the server sees it).
func dialFrom(t *testing.T, src, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// accepted waits for the server side of the next accepted connection and
// checks that it is the one dialled from c.
func accepted(t *testing.T, ch <-chan net.Conn, c net.Conn) net.Conn {
	t.Helper()
	select {
	case s := <-ch:
		if s.RemoteAddr().String() != c.LocalAddr().String() {
			t.Fatalf("accepted %s, want the connection from %s", s.RemoteAddr(), c.LocalAddr())
		}
		return s
	case <-time.After(10 * time.Second):
		t.Fatalf("the connection from %s was not accepted", c.LocalAddr())
		return nil
	}
}

// refused dials addr from src and checks that the server closed the
// connection without the client sending anything: a read ends in EOF or a
// reset, not in the read deadline. (The reset may even beat the dial's
// return, which then fails with it.)
func refused(t *testing.T, src, addr string) {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(src)}, Timeout: 10 * time.Second}
	c, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNRESET) {
		return
	}
	if err != nil {
		t.Fatalf("dial %s from %s: %v", addr, src, err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("connection from %s over the cap is still open (read: %v)", c.LocalAddr(), err)
	}
}

func TestLimitsConnCaps(t *testing.T) {
	inner, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ln := Listen(inner, Limits{MaxConns: 4, MaxConnsPerIP: 2}, logger)
	ch := acceptAll(t, ln)
	addr := inner.Addr().String()

	var held []net.Conn
	keep := func(c net.Conn) net.Conn { held = append(held, c); return c }

	// Per IP: two from 127.0.0.1, the third is closed at once.
	a1 := keep(accepted(t, ch, dialFrom(t, "127.0.0.1", addr)))
	keep(accepted(t, ch, dialFrom(t, "127.0.0.1", addr)))
	refused(t, "127.0.0.1", addr)
	// Another IP has its own allowance...
	b1 := keep(accepted(t, ch, dialFrom(t, "127.0.0.2", addr)))
	keep(accepted(t, ch, dialFrom(t, "127.0.0.2", addr)))
	if st := ln.Stats(); st.Open != 4 || st.IPs != 2 || st.Refused != 1 {
		t.Fatalf("stats %+v, want 4 open from 2 IPs, 1 refused", st)
	}
	// ...but the total is capped: a third IP finds no room.
	refused(t, "127.0.0.3", addr)

	// Closing frees the places, once each however often Close is called.
	a1.Close()
	a1.Close()
	b1.Close()
	if st := ln.Stats(); st.Open != 2 || st.Refused != 2 {
		t.Fatalf("after closing two: stats %+v, want 2 open, 2 refused", st)
	}
	keep(accepted(t, ch, dialFrom(t, "127.0.0.1", addr)))
	keep(accepted(t, ch, dialFrom(t, "127.0.0.3", addr)))
	refused(t, "127.0.0.4", addr)

	// Closing everything leaves no bookkeeping behind (no leak).
	for _, c := range held {
		c.Close()
	}
	if st := ln.Stats(); st.Open != 0 || st.IPs != 0 || st.Refused != 3 {
		t.Fatalf("after closing all: stats %+v, want nothing open, 3 refused", st)
	}
}
