package fencedstore

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// benchWrites runs b.N durable writes from 32 goroutines over 8 keys, each
// with a higher token than the last (so every write is accepted), and
// reports writes/s.
func benchWrites(b *testing.B, write func(WriteRequest) error) {
	const writers, keys = 32, 8
	var next, tok atomic.Uint64
	data := string(make([]byte, 100))
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for w := range writers {
		wg.Go(func() {
			for next.Add(1) <= uint64(b.N) {
				r := WriteRequest{ClientID: fmt.Sprintf("w%d", w), Token: FencingToken{Key: fmt.Sprintf("key-%d", w%keys), Value: tok.Add(1)}, Data: data}
				if err := write(r); err != nil && !isStale(err) {
					b.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	b.StopTimer()
	b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "writes/s")
}

// isStale: tokens are handed out before the write races to the store, so a
// few writes lose to a higher token on the same key; they are still durable
// decisions, logged and fsynced.
func isStale(err error) bool {
	_, ok := err.(*StaleTokenError)
	return ok
}

// BenchmarkWrite32: 32 concurrent writers on the library, every write
// fsynced before it returns (group commit).
func BenchmarkWrite32(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "data"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchWrites(b, func(r WriteRequest) error {
		_, err := s.Write(context.Background(), r)
		return err
	})
}

// BenchmarkHTTPWrite32: the same through the HTTP handler and Client over
// loopback.
func BenchmarkHTTPWrite32(b *testing.B) {
	s, err := Open(filepath.Join(b.TempDir(), "data"), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	srv := &http.Server{Handler: NewHandler(s, HandlerOptions{})}
	go srv.Serve(ln)
	defer srv.Close()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	defer tr.CloseIdleConnections()
	c := NewClient("http://"+ln.Addr().String(), &http.Client{Transport: tr})
	benchWrites(b, func(r WriteRequest) error { return c.Write(context.Background(), r) })
}

// BenchmarkDecodeWrite: the strict decoding of a POST /write body (unknown
// fields, null, trailing data, text altered by decoding) against a plain
// json.Decode of the same body, with 1 KiB of data.
func BenchmarkDecodeWrite(b *testing.B) {
	body := []byte(`{"clientID": "worker-7", "fencingToken": {"key": "orders/eu", "value": 12}, "data": "` +
		strings.Repeat("x", 1024) + `"}`)
	b.Run("strict", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, e := decodeWrite(bytes.NewReader(body)); e != nil {
				b.Fatal(e.Message)
			}
		}
	})
	b.Run("plain", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			var req WriteRequest
			if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
