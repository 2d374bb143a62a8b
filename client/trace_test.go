package client_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/lockgate/lockgate/client"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// fakeGateway answers every acquire with a grant, announcing features,
// and hands each acquire frame, as received, to frames.
func fakeGateway(t *testing.T, features string, frames chan<- map[string]any) string {
	return fakeGatewayDropping(t, func(int) (string, bool) { return features, false }, frames)
}

// fakeGatewayDropping is fakeGateway with the features of its nth
// connection (from 0) chosen by conn, which may also have that connection
// dropped after its first acquire, unanswered.
func fakeGatewayDropping(t *testing.T, conn func(n int) (features string, drop bool), frames chan<- map[string]any) string {
	t.Helper()
	up := websocket.Upgrader{}
	var conns atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		features, drop := conn(int(conns.Add(1) - 1))
		ws, err := up.Upgrade(w, r, http.Header{wire.FeaturesHeader: {features}})
		if err != nil {
			return
		}
		defer ws.Close()
		for {
			_, data, err := ws.ReadMessage()
			if err != nil {
				return
			}
			var m map[string]any
			json.Unmarshal(data, &m)
			id, _ := m["id"].(string)
			key, _ := m["key"].(string)
			if m["commandType"] != float64(wire.CmdTryAcquire) {
				ws.WriteJSON(wire.Reply{ID: id, Type: wire.TypeReleased, Success: true, Key: key})
				continue
			}
			frames <- m
			if drop {
				return
			}
			ws.WriteJSON(wire.Reply{ID: id, Type: wire.TypeGrant, Success: true, Key: key,
				FencingToken: &wire.FencingToken{Key: key, Value: 1}, LockToken: strings.Repeat("a", 32), TTL: 10000, Owner: "o"})
		}
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// TestTraceparentSent: under a span, the client's request carries the
// span's W3C traceparent to a gateway that announces the feature, and
// nothing to one that does not (an older gateway refuses unknown fields);
// without a span it carries none.
func TestTraceparentSent(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	traced, span := tp.Tracer("app").Start(context.Background(), "app")
	defer span.End()
	want := "00-" + span.SpanContext().TraceID().String() + "-" + span.SpanContext().SpanID().String() + "-01"
	for _, c := range []struct {
		features string
		ctx      context.Context
		want     string
	}{
		{"wanted," + wire.FeatureTraceparent, traced, want},
		{"wanted", traced, ""},
		{wire.FeatureTraceparent, context.Background(), ""},
	} {
		frames := make(chan map[string]any, 1)
		cl, err := client.New([]string{fakeGateway(t, c.features, frames)}, client.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(c.ctx, 10*time.Second)
		_, err = cl.TryAcquire(ctx, "k", lock.AcquireOptions{TTL: 10 * time.Second})
		cancel()
		if err != nil {
			t.Fatalf("features %q: %v", c.features, err)
		}
		m := <-frames
		got, has := m["traceparent"].(string)
		if got != c.want || has != (c.want != "") {
			t.Errorf("features %q, span %v: traceparent %q (present %v), want %q", c.features, c.ctx != context.Background(), got, has, c.want)
		}
		cl.Close()
	}
}

// TestTraceparentNotResent: an acquire re-sent after a dropped connection
// to a gateway that no longer announces the feature (say, one rolled back
// to an older version) goes without the field it carried the first time.
func TestTraceparentNotResent(t *testing.T) {
	tp := sdktrace.NewTracerProvider()
	defer tp.Shutdown(context.Background())
	ctx, span := tp.Tracer("app").Start(context.Background(), "app")
	defer span.End()
	frames := make(chan map[string]any, 2)
	addr := fakeGatewayDropping(t, func(n int) (string, bool) {
		if n == 0 {
			return wire.FeatureTraceparent, true
		}
		return "wanted", false
	}, frames)
	cl, err := client.New([]string{addr}, client.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if _, err := cl.TryAcquire(ctx, "k", lock.AcquireOptions{TTL: 10 * time.Second}); err != nil {
		t.Fatal(err)
	}
	first, second := <-frames, <-frames
	if _, ok := first["traceparent"]; !ok {
		t.Errorf("first copy %v: no traceparent to the gateway that announced it", first)
	}
	if tp, ok := second["traceparent"]; ok {
		t.Errorf("re-sent copy carries traceparent %v to a gateway that does not announce it", tp)
	}
}
