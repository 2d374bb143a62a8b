package cli

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// TestServeExportsTraces: `lockgate serve --otlp-endpoint URL` exports the
// spans of an acquire over OTLP/HTTP to URL, under service.name lockgate,
// with the key's hash and not the key itself.
func TestServeExportsTraces(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and starts lockgate serve")
	}
	var mu sync.Mutex
	var got []byte
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		if r.URL.Path == "/v1/traces" {
			mu.Lock()
			got = append(got, body...)
			mu.Unlock()
		}
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer sink.Close()
	t.Setenv("OTEL_BSP_SCHEDULE_DELAY", "20") // ms: export at once rather than every 5 s
	const key = "tenant-secret/orders"
	addr := startServe(t, testenv.BuildLockgate(t), []string{"serve", "--nodes", "1", "--listen", "127.0.0.1:0", "--otlp-endpoint", sink.URL})
	c, err := client.New([]string{addr}, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	lease, err := c.Acquire(ctx, key, lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Release(ctx, lease)
	deadline := time.Now().Add(20 * time.Second)
	for {
		mu.Lock()
		b := bytes.Clone(got)
		mu.Unlock()
		// OTLP's protobuf keeps strings as they are: the span and
		// attribute names can be found in the bytes.
		if bytes.Contains(b, []byte("lockgate acquire")) && bytes.Contains(b, []byte("raftlock commit")) {
			if !bytes.Contains(b, []byte("lockgate.key_hash")) || !bytes.Contains(b, []byte("lockgate")) {
				t.Errorf("exported spans lack the key hash or the service name")
			}
			if bytes.Contains(b, []byte(key)) {
				t.Errorf("exported spans hold the key name, though --otlp-key-names was not given")
			}
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the sink got no acquire spans (%d bytes)", len(b))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
