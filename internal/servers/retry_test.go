package servers

import (
	"context"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// takenPortPicker returns a picker whose first answer includes a port that
// is held by a listener, so the server's first start fails with "address
// already in use"; later answers are real free ports.
func takenPortPicker(t *testing.T) (pick portPicker, taken int, calls func() int) {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	taken = l.Addr().(*net.TCPAddr).Port
	var mu sync.Mutex
	n := 0
	pick = func(k int) ([]int, error) {
		mu.Lock()
		n++
		first := n == 1
		mu.Unlock()
		ports, err := freePorts(k)
		if err == nil && first {
			ports[0] = taken
		}
		return ports, err
	}
	calls = func() int {
		mu.Lock()
		defer mu.Unlock()
		return n
	}
	return pick, taken, calls
}

// The Start functions retry with new ports when the chosen one is taken
// (e.g. by a server of a test running in parallel).
func TestStartRetriesTakenPort(t *testing.T) {
	t.Parallel()
	t.Run("redis", func(t *testing.T) {
		t.Parallel()
		pick, taken, calls := takenPortPicker(t)
		r, err := StartRedis(context.Background(), RedisOptions{Bin: requireBinary(t, "redis-server"), Log: t, pick: pick})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(r.Close)
		if r.Port == taken || calls() != 2 {
			t.Errorf("Port = %d (taken %d), picker called %d times; want a new port on the 2nd attempt", r.Port, taken, calls())
		}
		redisSetGet(t, r.Addr, "k", "v")
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		pick, taken, calls := takenPortPicker(t)
		p, err := StartPostgres(context.Background(), PostgresOptions{BinDir: requirePostgres(t), Log: t, pick: pick})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(p.Close)
		if p.Port == taken || calls() != 2 {
			t.Errorf("Port = %d (taken %d), picker called %d times; want a new port on the 2nd attempt", p.Port, taken, calls())
		}
		pgExec(t, pgConnect(t, p.URL), "SELECT 1")
	})
	t.Run("etcd", func(t *testing.T) {
		t.Parallel()
		pick, taken, calls := takenPortPicker(t)
		e, err := StartEtcd(context.Background(), 1, EtcdOptions{Bin: requireBinary(t, "etcd"), Log: t, pick: pick})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(e.Close)
		if strings.HasSuffix(e.Endpoints[0], ":"+strconv.Itoa(taken)) || calls() != 2 {
			t.Errorf("Endpoints = %v (taken %d), picker called %d times; want new ports on the 2nd attempt", e.Endpoints, taken, calls())
		}
		etcdPut(t, newEtcdClient(t, e.Endpoints...), "k", "v")
	})
}

// A server that fails for another reason is reported at once, with its
// exit status and log, and not mistaken for a taken port.
func TestStartReportsEarlyExit(t *testing.T) {
	t.Parallel()
	bin := requireBinary(t, "redis-server")
	r := &Redis{Dir: t.TempDir(), proc: &proc{log: t, path: bin}}
	r.proc.dir = r.Dir
	r.setPort(70000) // out of range: redis rejects its configuration and exits
	if err := r.proc.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.proc.stop)
	start := time.Now()
	err := r.proc.waitReady(start.Add(readyTimeout), r.ping)
	if err == nil {
		t.Fatal("waitReady succeeded for a server with an invalid port")
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("early exit noticed only after %v", d)
	}
	if isAddrInUse(err) {
		t.Errorf("isAddrInUse(%v) = true", err)
	}
	for _, want := range []string{"exited before becoming ready", "exit status 1", "port"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not contain %q: %v", want, err)
		}
	}
}

func TestListensOn(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	if owned, known := listensOn(os.Getpid(), port); !owned || !known {
		t.Errorf("listensOn(self, %d) = %v, %v while listening; want true, true", port, owned, known)
	}
	l.Close()
	if owned, known := listensOn(os.Getpid(), port); owned || !known {
		t.Errorf("listensOn(self, %d) = %v, %v after close; want false, true", port, owned, known)
	}
}

// A probe that is answered by somebody else's server on our port (a
// parallel test grabbed it first) must not count as ready: it is reported
// as a taken port, so the Start functions retry with new ports.
func TestStartDetectsForeignServer(t *testing.T) {
	t.Parallel()
	foreign, err := StartRedis(context.Background(), RedisOptions{Bin: requireBinary(t, "redis-server"), Log: t})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(foreign.Close)
	// Our "server" never listens; the probe reaches the foreign one.
	p := &proc{log: t, name: "impostor", path: "/bin/sleep", args: []string{"30"}, ports: []int{foreign.Port}}
	if err := p.start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.stop)
	err = p.waitReady(time.Now().Add(readyTimeout), foreign.ping)
	if err == nil || !isAddrInUse(err) || !strings.Contains(err.Error(), "held by another process") {
		t.Fatalf("waitReady = %v; want a taken-port error", err)
	}
}
