package gateway

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
)

// BenchmarkIdleConnections opens 10k WebSocket connections from a child
// process, each holding one lock, and reports the gateway's memory per
// connection (heap + goroutine stacks). Goal: ≤ 32 KiB.
func BenchmarkIdleConnections(b *testing.B) { benchConnections(b, "hold") }

// BenchmarkWaitingConnections is BenchmarkIdleConnections with each of
// the 10k connections waiting (acquire, 1) for a key another connection
// holds (the scale goal: ≤ 32 KiB per connection, the wait's goroutine and
// state included). The holder's own connection and leases count too.
func BenchmarkWaitingConnections(b *testing.B) { benchConnections(b, "wait") }

func benchConnections(b *testing.B, mode string) {
	n := 10_000
	if s := os.Getenv("GATEWAY_BENCH_CONNS"); s != "" {
		n, _ = strconv.Atoi(s)
	}
	for b.Loop() {
		_, srv := startGateway(b, Options{MaxLocksPerConn: n})
		before := memInUse()
		child := exec.Command(os.Args[0], "-test.run=^TestConnectionsHelper$", "-test.count=1")
		child.Env = append(os.Environ(), "GATEWAY_HELPER_ADDR="+strings.TrimPrefix(srv.URL, "http://"), "GATEWAY_HELPER_CONNS="+strconv.Itoa(n),
			"GATEWAY_HELPER_MODE="+mode)
		stdin, _ := child.StdinPipe()
		stdout, _ := child.StdoutPipe()
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		ready := false
		var said []string
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY") {
				ready = true
				break
			}
			said = append(said, sc.Text())
		}
		if !ready {
			child.Process.Kill()
			child.Wait()
			b.Fatalf("the connecting child did not get ready:\n%s", strings.Join(said, "\n"))
		}
		after := memInUse()
		b.ReportMetric(float64(after-before)/float64(n)/1024, "KiB/conn")
		stdin.Close()
		child.Wait()
	}
}

func memInUse() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapInuse + m.StackInuse
}

// TestConnectionsHelper is BenchmarkIdleConnections' child: it opens the
// connections, takes one lock on each (GATEWAY_HELPER_MODE=wait: one more
// connection holds every key, and each waits for its own), prints READY
// and waits for stdin to close. It does nothing on its own.
func TestConnectionsHelper(t *testing.T) {
	addr := os.Getenv("GATEWAY_HELPER_ADDR")
	if addr == "" {
		t.Skip("child of BenchmarkIdleConnections")
	}
	n, _ := strconv.Atoi(os.Getenv("GATEWAY_HELPER_CONNS"))
	wait := os.Getenv("GATEWAY_HELPER_MODE") == "wait"
	conns := make([]*websocket.Conn, 0, n+1)
	dial := func(i int) *websocket.Conn {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws", nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		conns = append(conns, ws)
		return ws
	}
	call := func(ws *websocket.Conn, req map[string]any) wire.Reply {
		if err := ws.WriteJSON(req); err != nil {
			t.Fatal(err)
		}
		for {
			var r wire.Reply
			if err := ws.ReadJSON(&r); err != nil || r.Type == "error" {
				t.Fatalf("%v: %+v %v", req, r, err)
			}
			if r.Type != wire.TypeWanted { // the holder hears its keys are wanted
				return r
			}
		}
	}
	var holder *websocket.Conn
	if wait {
		holder = dial(-1)
	}
	for i := range n {
		key := fmt.Sprint("idle-", i)
		if wait {
			call(holder, map[string]any{"id": "h", "commandType": 5, "key": key, "ttl": 3600000})
		}
		ws := dial(i)
		if !wait {
			call(ws, map[string]any{"id": "1", "commandType": 5, "key": key, "ttl": 3600000})
			continue
		}
		if err := ws.WriteJSON(map[string]any{"id": "w", "commandType": 1, "key": key, "ttl": 3600000}); err != nil {
			t.Fatal(err)
		}
		// The wait is queued once the key shows a waiter.
		for r := call(ws, map[string]any{"id": "i", "commandType": 4, "key": key}); r.Waiters == nil || *r.Waiters < 1; r = call(ws, map[string]any{"id": "i", "commandType": 4, "key": key}) {
		}
	}
	fmt.Println("READY")
	bufio.NewReader(os.Stdin).ReadString('\n')
	for _, c := range conns {
		c.Close()
	}
}
