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
func BenchmarkIdleConnections(b *testing.B) {
	const n = 10_000
	for b.Loop() {
		_, srv := startGateway(b, Options{})
		before := memInUse()
		child := exec.Command(os.Args[0], "-test.run=^TestConnectionsHelper$", "-test.count=1")
		child.Env = append(os.Environ(), "GATEWAY_HELPER_ADDR="+strings.TrimPrefix(srv.URL, "http://"), "GATEWAY_HELPER_CONNS="+strconv.Itoa(n))
		stdin, _ := child.StdinPipe()
		stdout, _ := child.StdoutPipe()
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			b.Fatal(err)
		}
		sc := bufio.NewScanner(stdout)
		ready := false
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "READY") {
				ready = true
				break
			}
		}
		if !ready {
			child.Process.Kill()
			child.Wait()
			b.Fatal("the connecting child did not get ready")
		}
		after := memInUse()
		b.ReportMetric(float64(after-before)/n/1024, "KiB/conn")
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
// connections, takes one lock on each, prints READY and waits for stdin to
// close. It does nothing on its own.
func TestConnectionsHelper(t *testing.T) {
	addr := os.Getenv("GATEWAY_HELPER_ADDR")
	if addr == "" {
		t.Skip("child of BenchmarkIdleConnections")
	}
	n, _ := strconv.Atoi(os.Getenv("GATEWAY_HELPER_CONNS"))
	conns := make([]*websocket.Conn, 0, n)
	for i := range n {
		ws, _, err := websocket.DefaultDialer.Dial("ws://"+addr+"/v1/ws", nil)
		if err != nil {
			t.Fatalf("connection %d: %v", i, err)
		}
		if err := ws.WriteJSON(map[string]any{"id": "1", "commandType": 5, "key": fmt.Sprint("idle-", i), "ttl": 3600000}); err != nil {
			t.Fatal(err)
		}
		var r wire.Reply
		if err := ws.ReadJSON(&r); err != nil || r.Type != "grant" {
			t.Fatalf("connection %d: %+v %v", i, r, err)
		}
		conns = append(conns, ws)
	}
	fmt.Println("READY")
	bufio.NewReader(os.Stdin).ReadString('\n')
	for _, c := range conns {
		c.Close()
	}
}
