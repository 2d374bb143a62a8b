package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/internal/workerpool"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// goroutineSlack is what a test allows above a limit's bound for goroutines
// that are not the gateway's per-frame work: the test's own, the HTTP
// server's, timers firing.
const goroutineSlack = 48

// peakGoroutines samples runtime.NumGoroutine until stop is called, and
// returns the highest count seen.
func peakGoroutines() (stop func() int) {
	var peak atomic.Int64
	done := make(chan struct{})
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		for {
			if n := int64(runtime.NumGoroutine()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-done:
				return
			default:
				runtime.Gosched()
			}
		}
	}()
	return func() int {
		close(done)
		<-finished
		return int(peak.Load())
	}
}

// flood sends frames from a goroutine of its own while the caller reads
// the replies, as a pipelining client does.
func (c *wsClient) flood(frames []string) <-chan error {
	errc := make(chan error, 1)
	go func() {
		for _, f := range frames {
			if err := c.ws.WriteMessage(websocket.TextMessage, []byte(f)); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	return errc
}

// recvN reads n replies and returns them by id; it fails the test if an id
// repeats.
func (c *wsClient) recvN(n int) map[string]wire.Reply {
	c.t.Helper()
	got := make(map[string]wire.Reply, n)
	for range n {
		r := c.recv()
		if _, dup := got[r.ID]; dup {
			c.t.Fatalf("two replies to %q", r.ID)
		}
		got[r.ID] = r
	}
	return got
}

// TestLimitsTryAcquireFlood: 10,000 try-acquires pipelined on one
// connection are served at most MaxInFlightPerConn at a time, on the
// worker pool's goroutines (once one goroutine each, 2,677 at peak for
// 5,000), and every frame is answered.
func TestLimitsTryAcquireFlood(t *testing.T) {
	_, srv := startGateway(t, Options{})
	c := dial(t, srv)
	c.send(map[string]any{"id": "warm", "commandType": 4, "key": "warm"})
	c.expect("warm", "error", "not_found")
	base := runtime.NumGoroutine()

	const n = 10_000
	frames := make([]string, n)
	for i := range frames {
		frames[i] = fmt.Sprintf(`{"id":"%d","commandType":5,"key":"flood-%d","ttl":60000}`, i, i%500)
	}
	stop := peakGoroutines()
	errc := c.flood(frames)
	got := c.recvN(n)
	peak := stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	grants := 0
	for i := range n {
		r, ok := got[fmt.Sprint(i)]
		switch {
		case !ok:
			t.Fatalf("frame %d got no answer", i)
		case r.Type == "grant":
			grants++
		case r.Error == nil || r.Error.Code != "held":
			t.Fatalf("frame %d: %+v", i, r)
		}
	}
	if grants != 500 {
		t.Errorf("%d grants, want 500 (one per key)", grants)
	}
	// The frames in flight are bounded by the connection's slots; the
	// goroutines that ran them are the worker pool's, which keeps up to
	// workerpool.MaxIdle of them between calls. A worker that has freed
	// its slot but not yet parked as idle still counts, and the pool
	// starts another for the next frame meanwhile: on a starved machine
	// those come on top (129, then 189 at peak beside a second suite). So
	// the bound is twice the slots and the reserve: still far below a
	// goroutine per frame (2,677 at peak for 5,000 frames, once).
	if limit := base + 2*(DefaultMaxInFlightPerConn+workerpool.MaxIdle) + goroutineSlack; peak > limit {
		t.Errorf("%d goroutines at peak (%d before the flood), want at most %d: frames are not bounded per connection", peak, base, limit)
	}
	t.Logf("goroutines: %d before the flood, %d at peak", base, peak)
}

// TestLimitsHeldLocksPerConn: a connection holds at most MaxLocksPerConn
// leases (acquires in progress count); one more is too_many_locks, for
// try-acquire and acquire alike, and a release makes room. Another
// connection is not affected.
func TestLimitsHeldLocksPerConn(t *testing.T) {
	_, srv := startGateway(t, Options{MaxLocksPerConn: 3})
	a, b := dial(t, srv), dial(t, srv)
	var first wire.Reply
	for i := range 3 {
		a.send(map[string]any{"id": fmt.Sprint("g", i), "commandType": 5, "key": fmt.Sprint("k", i), "ttl": 60000})
		r := a.expect(fmt.Sprint("g", i), "grant", "")
		if i == 0 {
			first = r
		}
	}
	a.send(map[string]any{"id": "t", "commandType": 5, "key": "k3", "ttl": 60000})
	e := a.expect("t", "error", "too_many_locks")
	if !strings.Contains(e.Error.Message, "3") {
		t.Errorf("too_many_locks message %q does not name the limit", e.Error.Message)
	}
	a.send(map[string]any{"id": "w", "commandType": 1, "key": "k3", "ttl": 60000})
	a.expect("w", "error", "too_many_locks")
	// The refused key was not taken.
	b.send(map[string]any{"id": "b", "commandType": 5, "key": "k3", "ttl": 60000})
	b.expect("b", "grant", "")

	a.send(map[string]any{"id": "r", "commandType": 2, "key": "k0", "lockToken": first.LockToken, "fencingToken": first.FencingToken, "ack": true})
	a.expect("r", "released", "")
	a.send(map[string]any{"id": "again", "commandType": 5, "key": "k4", "ttl": 60000})
	a.expect("again", "grant", "")
	a.send(map[string]any{"id": "over", "commandType": 5, "key": "k5", "ttl": 60000})
	a.expect("over", "error", "too_many_locks")
}

// TestLimitsHeldLocksExpire: a lease that runs out leaves the connection's
// count without a release.
func TestLimitsHeldLocksExpire(t *testing.T) {
	_, srv := startGateway(t, Options{MaxLocksPerConn: 1})
	a := dial(t, srv)
	a.send(map[string]any{"id": "g", "commandType": 5, "key": "short", "ttl": 500})
	a.expect("g", "grant", "")
	a.send(map[string]any{"id": "full", "commandType": 5, "key": "other", "ttl": 60000})
	a.expect("full", "error", "too_many_locks")
	deadline := time.Now().Add(5 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprint("t", i)
		a.send(map[string]any{"id": id, "commandType": 5, "key": "other", "ttl": 60000})
		r := a.recv()
		if r.Type == "grant" {
			break
		}
		if r.Error == nil || r.Error.Code != "too_many_locks" || time.Now().After(deadline) {
			t.Fatalf("after the lease's TTL: %+v", r)
		}
		time.Sleep(10 * time.Millisecond) // polling for the expiry: there is no event to wait on over the wire
	}
}

// TestLimitsRESTTickets: a client (its bearer token; without tokens, its
// IP address) has at most MaxTicketsPerClient tickets; one more is 429
// too_many_tickets; another client is not affected; collecting a ticket
// makes room.
func TestLimitsRESTTickets(t *testing.T) {
	const tokA, tokB = "token-a-0123456789", "token-b-0123456789"
	tokens, err := NewTokens(tokA, tokB)
	if err != nil {
		t.Fatal(err)
	}
	_, srv := startGateway(t, Options{MaxTicketsPerClient: 2, SyncWindow: time.Millisecond, Tokens: tokens})
	u := srv.URL + "/locks/k"
	if code, m := doAuth(t, tokA, "POST", u, `{"ttl_ms":60000}`); code != 200 {
		t.Fatalf("POST = %d %v", code, m)
	}
	var polls []string
	for i := range 2 {
		code, m := doAuth(t, tokA, "POST", u, `{"ttl_ms":60000,"wait_ms":60000}`)
		if code != 202 {
			t.Fatalf("waiting POST %d = %d %v, want 202", i, code, m)
		}
		polls = append(polls, m["poll"].(string))
	}
	code, m := doAuth(t, tokA, "POST", u, `{"ttl_ms":60000,"wait_ms":60000}`)
	if code != http.StatusTooManyRequests || errCode(m) != "too_many_tickets" {
		t.Fatalf("third ticket = %d %v, want 429 too_many_tickets", code, m)
	}
	if code, m := doAuth(t, tokB, "POST", u, `{"ttl_ms":60000,"wait_ms":60000}`); code != 202 {
		t.Fatalf("another token's ticket = %d %v, want 202", code, m)
	}
	if code, m := doAuth(t, tokA, "DELETE", srv.URL+polls[0], ``); code != 204 {
		t.Fatalf("cancelling a ticket = %d %v", code, m)
	}
	if code, m := doAuth(t, tokA, "POST", u, `{"ttl_ms":60000,"wait_ms":60000}`); code != 202 {
		t.Fatalf("a ticket after cancelling one = %d %v, want 202", code, m)
	}

	// Without tokens the client is its IP address: every loopback client
	// shares the budget.
	_, srv = startGateway(t, Options{MaxTicketsPerClient: 1, SyncWindow: time.Millisecond})
	u = srv.URL + "/locks/k"
	do(t, "POST", u, "", `{"ttl_ms":60000}`)
	if code, m, _ := do(t, "POST", u, "", `{"ttl_ms":60000,"wait_ms":60000}`); code != 202 {
		t.Fatalf("waiting POST = %d %v", code, m)
	}
	if code, m, _ := do(t, "POST", u, "", `{"ttl_ms":60000,"wait_ms":60000}`); code != 429 || errCode(m) != "too_many_tickets" {
		t.Fatalf("second ticket from the same address = %d %v, want 429 too_many_tickets", code, m)
	}
}

// doAuth is do with a bearer token.
func doAuth(t *testing.T, token, method, url, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	decodeJSON(resp.Body, &m)
	return resp.StatusCode, m
}

// TestLimitsRenewDuringMaxWaiters: with the connection's maximum of
// acquires waiting, its renews are still served (waits do not occupy the
// in-flight slots), and a flood of renews then stays within the in-flight
// bound on top of the waiters' goroutines.
func TestLimitsRenewDuringMaxWaiters(t *testing.T) {
	_, srv := startGateway(t, Options{})
	a, b := dial(t, srv), dial(t, srv)
	b.send(map[string]any{"id": "busy", "commandType": 5, "key": "busy", "ttl": 60000})
	b.expect("busy", "grant", "")
	a.send(map[string]any{"id": "mine", "commandType": 5, "key": "mine", "ttl": 60000})
	mine := a.expect("mine", "grant", "")

	frames := make([]string, DefaultMaxWaitersPerConn)
	for i := range frames {
		frames[i] = fmt.Sprintf(`{"id":"w%d","commandType":1,"key":"busy"}`, i)
	}
	if err := <-a.flood(frames); err != nil {
		t.Fatal(err)
	}
	// The waits are all registered once one more is refused.
	a.send(map[string]any{"id": "extra", "commandType": 1, "key": "busy"})
	a.expect("extra", "error", "too_many_waiters")
	base := runtime.NumGoroutine()

	renew := fmt.Sprintf(`{"id":"r%%d","commandType":3,"key":"mine","lockToken":%q,"fencingToken":{"key":"mine","value":%d},"ttl":60000}`,
		mine.LockToken, mine.FencingToken.Value)
	const n = 2000
	frames = make([]string, n)
	for i := range frames {
		frames[i] = fmt.Sprintf(renew, i)
	}
	stop := peakGoroutines()
	errc := a.flood(frames)
	got := a.recvN(n)
	peak := stop()
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	for id, r := range got {
		if r.Type != "renewed" {
			t.Fatalf("%s: %+v", id, r)
		}
	}
	// The frames in flight are bounded by the connection's slots; the
	// goroutines that ran them are the worker pool's, which keeps up to
	// workerpool.MaxIdle of them between calls. A worker that has freed
	// its slot but not yet parked as idle still counts (on a loaded
	// machine many do at once: 129 seen beside a second suite), so the
	// bound is both, and still far below a goroutine per frame.
	if limit := base + 2*(DefaultMaxInFlightPerConn+workerpool.MaxIdle) + goroutineSlack; peak > limit {
		t.Errorf("%d goroutines at peak (%d with the waiters), want at most %d", peak, base, limit)
	}
	t.Logf("goroutines: %d with %d waiters, %d at peak of the renews", base, DefaultMaxWaitersPerConn, peak)
}

// TestLimitsInFlightBackPressure: with MaxInFlightPerConn calls stuck in
// the backend, the connection's next frame waits (the reader stops), and
// is served once a slot frees.
func TestLimitsInFlightBackPressure(t *testing.T) {
	bl := &blockingLocker{Locker: newMemLocker(), entered: make(chan struct{}, 16), unblock: make(chan struct{})}
	g := New(bl, Options{MaxInFlightPerConn: 2})
	srv := newServer(t, g)
	c := dial(t, srv)
	for i := range 2 {
		c.send(map[string]any{"id": fmt.Sprint("i", i), "commandType": 4, "key": "slow"})
		<-bl.entered
	}
	c.send(map[string]any{"id": "third", "commandType": 4, "key": "slow"})
	select {
	case <-bl.entered:
		t.Fatal("a third frame reached the backend with two in flight and a bound of two")
	case <-time.After(200 * time.Millisecond): // proving absence: nothing to await
	}
	var once sync.Once
	unblock := func() { once.Do(func() { close(bl.unblock) }) }
	defer unblock()
	unblock()
	got := c.recvN(3)
	for _, id := range []string{"i0", "i1", "third"} {
		if r := got[id]; r.Error == nil || r.Error.Code != "not_found" {
			t.Errorf("%s: %+v", id, r)
		}
	}
}

// blockingLocker holds every Inspect until unblock is closed, and reports
// each one's arrival on entered.
type blockingLocker struct {
	lock.Locker
	entered chan struct{}
	unblock chan struct{}
	// cancelled, if not nil, receives each Inspect that its context ended.
	cancelled chan struct{}
}

func (b *blockingLocker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	b.entered <- struct{}{}
	select {
	case <-b.unblock:
	case <-ctx.Done():
		if b.cancelled != nil {
			b.cancelled <- struct{}{}
		}
		return nil, ctx.Err()
	}
	return b.Locker.Inspect(ctx, key)
}

func newMemLocker() lock.Locker { return locktest.NewMemStore().NewLocker() }

// newServer serves g on a loopback port until the test ends.
func newServer(t *testing.T, g *Gateway) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(g)
	t.Cleanup(func() { g.Close(); srv.Close() })
	return srv
}

func decodeJSON(r io.Reader, v any) {
	data, _ := io.ReadAll(r)
	json.Unmarshal(data, v)
}

// TestLimitsCloseWithReaderHeldUp: Close ends the operations of a
// connection whose reader waits for an in-flight slot behind operations the
// backend holds up. Before, the connection's context ended only when its
// reader stopped, which it did only once a slot freed: the held operations
// ran on to their opTimeout (10 s) after Close.
func TestLimitsCloseWithReaderHeldUp(t *testing.T) {
	bl := &blockingLocker{Locker: newMemLocker(), entered: make(chan struct{}, 16), unblock: make(chan struct{}),
		cancelled: make(chan struct{}, 16)}
	defer close(bl.unblock)
	g := New(bl, Options{MaxInFlightPerConn: 2})
	waiting := make(chan struct{}, 1)
	g.slotWait = func() { waiting <- struct{}{} }
	srv := httptest.NewServer(g)
	defer srv.Close()
	c := dial(t, srv)
	for i := range 2 {
		c.send(map[string]any{"id": fmt.Sprint("i", i), "commandType": 4, "key": "slow"})
		<-bl.entered
	}
	c.send(map[string]any{"id": "third", "commandType": 4, "key": "slow"})
	<-waiting // the reader waits for a slot
	g.Close()
	deadline := time.After(opTimeout - 2*time.Second) // anything short of opTimeout tells the two apart
	for i := range 2 {
		select {
		case <-bl.cancelled:
		case <-deadline:
			t.Fatalf("%d of 2 held operations cancelled %v after Close", i, opTimeout-2*time.Second)
		}
	}
}
