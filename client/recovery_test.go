package client_test

import (
	"context"
	"errors"
	"io"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// proxy is a TCP relay in front of a real gateway that a test can cut (close
// every relayed connection, as a network failure would) or mute (drop what
// the gateway sends, so that requests arrive but their answers are lost).
type proxy struct {
	ln     net.Listener
	target string
	mute   atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func startProxy(t testing.TB, target string) *proxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{ln: ln, target: target}
	go p.serve()
	t.Cleanup(func() { ln.Close(); p.cut() })
	return p
}

func (p *proxy) addr() string { return p.ln.Addr().String() }

func (p *proxy) serve() {
	for {
		down, err := p.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", p.target)
		if err != nil {
			down.Close()
			continue
		}
		p.mu.Lock()
		p.conns = append(p.conns, down, up)
		p.mu.Unlock()
		go func() { io.Copy(up, down); up.Close(); down.Close() }()
		go func() {
			buf := make([]byte, 32<<10)
			for {
				n, err := up.Read(buf)
				if n > 0 && !p.mute.Load() {
					if _, werr := down.Write(buf[:n]); werr != nil {
						break
					}
				}
				if err != nil {
					break
				}
			}
			up.Close()
			down.Close()
		}()
	}
}

// cut closes every relayed connection; new ones are relayed again.
func (p *proxy) cut() {
	p.mu.Lock()
	cs := p.conns
	p.conns = nil
	p.mu.Unlock()
	for _, c := range cs {
		c.Close()
	}
}

// awaitConnected waits until c has a live connection.
func awaitConnected(t testing.TB, c *client.Client) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for c.Endpoint() == "" {
		if time.Now().After(deadline) {
			t.Fatal("client never connected")
		}
		time.Sleep(time.Millisecond)
	}
}

// TestWaiterSurvivesDrop: a waiting Acquire whose connection fails is
// re-sent on the next connection and granted when the holder releases;
// the caller sees only its grant. Renew, Inspect and Release through a
// connection that keeps failing work too.
func TestWaiterSurvivesDrop(t *testing.T) {
	store := locktest.NewMemStore()
	gw := startMemGateway(t, store)
	p := startProxy(t, gw)
	direct := newClient(t, []string{gw}, client.Options{})
	flaky := newClient(t, []string{p.addr()}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	held, err := direct.Acquire(ctx, "drop", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		lease *lock.Lease
		err   error
	}
	got := make(chan result, 1)
	go func() {
		l, err := flaky.Acquire(ctx, "drop", lock.AcquireOptions{TTL: time.Minute, Owner: "flaky"})
		got <- result{l, err}
	}()
	awaitWaiters(t, direct, "drop", 1)
	for range 3 {
		p.cut()
		awaitConnected(t, flaky)
		// The re-sent acquire queues again (the gateway dropped the wait
		// of the cut connection).
		awaitWaiters(t, direct, "drop", 1)
	}
	if err := direct.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	var r result
	select {
	case r = <-got:
	case <-time.After(10 * time.Second):
		t.Fatal("the waiter was never granted after its connection was cut")
	}
	if r.err != nil {
		t.Fatalf("waiter: %v", r.err)
	}
	if r.lease.Token <= held.Token || r.lease.Owner != "flaky" {
		t.Fatalf("waiter got token %d owner %q; want a token above %d and owner flaky", r.lease.Token, r.lease.Owner, held.Token)
	}

	p.cut()
	if err := flaky.Renew(ctx, r.lease, 0); err != nil {
		t.Fatalf("Renew after a cut: %v", err)
	}
	p.cut()
	if info, err := flaky.Inspect(ctx, "drop"); err != nil || info.Token != r.lease.Token {
		t.Fatalf("Inspect after a cut = %+v, %v", info, err)
	}
	p.cut()
	if err := flaky.Release(ctx, r.lease); err != nil {
		t.Fatalf("Release after a cut: %v", err)
	}
	if _, err := direct.Inspect(ctx, "drop"); !errors.Is(err, lock.ErrNotFound) {
		t.Fatalf("Inspect after the release: %v, want ErrNotFound", err)
	}
}

// TestReleaseAnswerLost: a release reaches the gateway and frees the lease,
// but its answer is lost with the connection. The re-sent copy is answered
// not_held. While the lease was alive by the holder's clock when the copy
// went out, only the first copy can have freed it, so Release succeeds; a
// lease already past its deadline may have been freed by the first copy or
// have expired first, so the outcome is unknown: lock.ErrUnavailable,
// never lock.ErrNotHeld, which would claim the release changed nothing.
func TestReleaseAnswerLost(t *testing.T) {
	store := locktest.NewMemStore()
	gw := startMemGateway(t, store)
	p := startProxy(t, gw)
	direct := newClient(t, []string{gw}, client.Options{})
	flaky := newClient(t, []string{p.addr()}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, tc := range []struct {
		name    string
		ttl     time.Duration
		expired bool // cut only after the lease's deadline
		want    error
	}{
		{"Alive", time.Minute, false, nil},
		{"PastDeadline", 300 * time.Millisecond, true, lock.ErrUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "lost-answer-" + tc.name
			lease, err := flaky.Acquire(ctx, key, lock.AcquireOptions{TTL: tc.ttl})
			if err != nil {
				t.Fatal(err)
			}
			p.mute.Store(true)
			done := make(chan error, 1)
			go func() { done <- flaky.Release(ctx, lease) }()
			// The release arrives and frees the key; its answer is dropped.
			for {
				if _, err := direct.Inspect(ctx, key); errors.Is(err, lock.ErrNotFound) {
					break
				}
				time.Sleep(time.Millisecond)
			}
			if tc.expired {
				<-lease.Done()
			}
			p.mute.Store(false)
			p.cut()
			select {
			case err := <-done:
				if tc.want == nil && err != nil {
					t.Fatalf("Release whose first copy freed the lease: %v, want success", err)
				}
				if tc.want != nil && !errors.Is(err, tc.want) {
					t.Fatalf("Release: %v, want %v", err, tc.want)
				}
			case <-time.After(15 * time.Second):
				t.Fatal("Release never returned")
			}
			if lease.Err() == nil {
				t.Error("lease Done still open after Release")
			}
		})
	}
}

// TestCloseDuringDrop: Close while the connection is down wakes a waiter
// with ErrClosed.
func TestCloseWhileDisconnected(t *testing.T) {
	store := locktest.NewMemStore()
	gw := startMemGateway(t, store)
	direct := newClient(t, []string{gw}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := direct.Acquire(ctx, "closing", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// A client of an address nobody listens on never connects.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := ln.Addr().String()
	ln.Close()
	sdk, err := client.New([]string{dead}, client.Options{Logger: quiet(t)})
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		_, err := sdk.Acquire(ctx, "closing", lock.AcquireOptions{TTL: time.Minute})
		got <- err
	}()
	time.Sleep(50 * time.Millisecond) // let it start waiting for a connection
	start := time.Now()
	sdk.Close()
	select {
	case err := <-got:
		if !errors.Is(err, lock.ErrClosed) {
			t.Errorf("Acquire of a closed client: %v, want ErrClosed", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Acquire did not return after Close")
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("Close took %v", d)
	}
	if err := direct.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
}

// TestLateGrantRenewed: a grant pushed after a wait longer than half the
// TTL is renewed before Acquire returns it, so the lease's deadline counts
// from the renewal, not from the acquire's send time (which would leave the
// caller less than half its TTL).
func TestLateGrantRenewed(t *testing.T) {
	store := locktest.NewMemStore()
	gw := startMemGateway(t, store)
	a := newClient(t, []string{gw}, client.Options{})
	b := newClient(t, []string{gw}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	const ttl = time.Second
	held, err := a.Acquire(ctx, "late", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	got := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "late", lock.AcquireOptions{TTL: ttl})
		if err != nil {
			t.Error(err)
		}
		got <- l
	}()
	awaitWaiters(t, a, "late", 1)
	time.Sleep(ttl*7/10 - time.Since(start)) // the wait must outlast half the TTL
	if err := a.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
	lease := <-got
	if lease == nil {
		t.FailNow()
	}
	granted := time.Now()
	if err := lease.Err(); err != nil {
		t.Fatalf("late grant already ended: %v", err)
	}
	// Without the renewal the deadline would be start + TTL − drift, about
	// 0.3 s after the grant.
	if left := time.Until(lease.Deadline()); left < ttl/2 {
		t.Errorf("late grant has %v left of its %v TTL; want at least half (it should have been renewed)", left, ttl)
	}
	if !lease.Deadline().After(start.Add(ttl)) {
		t.Errorf("deadline %v is not past the acquire's send + TTL %v", lease.Deadline().Sub(granted), start.Add(ttl).Sub(granted))
	}
	if err := b.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
}

// TestCloseLeavesNoGoroutines: after Close, the client's reader, pinger,
// connection manager and keep-alives are all gone.
func TestCloseLeavesNoGoroutines(t *testing.T) {
	store := locktest.NewMemStore()
	gw := startMemGateway(t, store)
	other := newClient(t, []string{gw}, client.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	held, err := other.Acquire(ctx, "leak-held", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	before := runtime.NumGoroutine()

	sdk, err := client.New([]string{gw}, client.Options{Logger: quiet(t)})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sdk.Acquire(ctx, "leak-renewed", lock.AcquireOptions{TTL: time.Second, AutoRenew: true}); err != nil {
		t.Fatal(err)
	}
	waiting := make(chan error, 1)
	go func() {
		_, err := sdk.Acquire(ctx, "leak-held", lock.AcquireOptions{TTL: time.Minute})
		waiting <- err
	}()
	awaitWaiters(t, other, "leak-held", 1)
	sdk.Close()
	if err := <-waiting; !errors.Is(err, lock.ErrClosed) {
		t.Errorf("waiter of a closed client: %v, want ErrClosed", err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > before {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines after Close, %d before the client:\n%s", runtime.NumGoroutine(), before, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := other.Release(ctx, held); err != nil {
		t.Fatal(err)
	}
}
