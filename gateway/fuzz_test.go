package gateway

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock/kit"
	"github.com/lockgate/lockgate/lock/locktest"
)

// FuzzFrame feeds arbitrary frames to the WebSocket command handler: it
// must never panic, and every frame it rejects gets an error reply.
func FuzzFrame(f *testing.F) {
	for _, s := range []string{
		`{"id":"1","commandType":1,"key":"k","ttl":1000}`,
		`{"id":"2","commandType":2,"key":"k","lockToken":"ab","fencingToken":{"key":"k","value":1}}`,
		`{"id":"3","commandType":3,"key":"k","lockToken":"ab","fencingToken":{"key":"k","value":1},"ttl":5}`,
		`{"id":"4","commandType":4,"key":"k"}`,
		`{"id":"5","commandType":5,"key":"k","value":"v","clientId":"c","releaseOnDisconnect":true}`,
		`{"id":"6","commandType":6,"target":"1"}`,
		`{`, `[]`, `null`, `{"commandType":1e99}`, `{"ttl":-9223372036854775808,"commandType":5,"key":"k"}`,
	} {
		f.Add([]byte(s))
	}
	g := New(locktest.NewMemStore().NewLocker(), Options{})
	f.Fuzz(func(t *testing.T, frame []byte) {
		ctx, cancel := context.WithCancel(context.Background())
		c := g.newConn(nil, ctx, cancel)
		c.handle(frame)
		cancel() // ends any wait the frame started
	})
}

// FuzzREST feeds arbitrary requests (method, path, query, body) to a
// fresh gateway's REST handlers. Whatever they are, the gateway never
// panics and never answers 5xx (an in-memory locker cannot be
// unavailable), and it answers 2xx only to a well-formed request: a lock
// route with a valid key, a body that is empty or one JSON object, and a
// wait_ms within bounds. Nothing is held beforehand, so no renew, release,
// inspect or ticket can succeed.
func FuzzREST(f *testing.F) {
	for _, s := range [][4]string{
		{"POST", "locks/k", "", `{"client_id":"a","ttl_ms":5000}`},
		{"POST", "locks/jobs%2Fnightly", "", `{"ttl_ms":60000,"wait_ms":30000,"value":"v"}`},
		{"POST", "locks/k", "", `{"lock_token":"0123456789abcdef0123456789abcdef"}`},
		{"POST", "locks/k", "", ``},
		{"POST", "locks/k", "", `null`},
		{"POST", "locks/k", "", `{"client_id":"a\ud800","value":"\ud83d\ude00"}`},
		{"POST", "locks/k", "", `{} {}`},
		{"POST", "locks/k", "", `{"ttl_ms":`},
		{"POST", "locks/k", "", `{"ttl":5}`},
		{"POST", "locks/k", "", `{"ttl_ms":-1}`},
		{"POST", "locks/k", "", `{"wait_ms":9223372036855}`},
		{"POST", "locks/a%FF", "", `{}`},
		{"POST", "locks/a%00", "", `{}`},
		{"PUT", "locks/k", "", `{"lock_token":"x","fencing_token":1}`},
		{"PUT", "locks/k", "", `{"lock_token":"0123456789abcdef0123456789abcdef","fencing_token":1,"ttl_ms":9000}`},
		{"DELETE", "locks/k", "lock_token=0123456789abcdef0123456789abcdef&fencing_token=1", ``},
		{"DELETE", "locks/k", "lock_token=x&fencing_token=-1", ``},
		{"DELETE", "locks/k", "", `{"lock_token":"0123456789abcdef0123456789abcdef","fencing_token":"7"}`},
		{"GET", "locks/k", "", ``},
		{"HEAD", "locks/k", "", ``},
		{"PATCH", "locks/k", "", ``},
		{"GET", "tickets/nope", "", ``},
		{"DELETE", "tickets/nope", "", ``},
		{"GET", "nope", "", ``},
	} {
		f.Add(s[0], s[1], s[2], s[3])
	}
	f.Fuzz(func(t *testing.T, method, path, query, body string) {
		req, err := http.NewRequest(method, "http://gateway/"+path+"?"+query, strings.NewReader(body))
		if err != nil {
			return // not a request an HTTP server would hand to the gateway
		}
		g := New(locktest.NewMemStore().NewLocker(), Options{SyncWindow: time.Millisecond, Logger: discardLogger})
		defer g.Close()
		rec := httptest.NewRecorder()
		g.ServeHTTP(rec, req)
		if rec.Code >= 500 {
			t.Fatalf("%s %s: %d %s", method, req.URL, rec.Code, rec.Body)
		}
		if rec.Code < 200 || rec.Code >= 300 {
			return
		}
		p := req.URL.EscapedPath()
		if strings.HasPrefix(p, "/tickets/") {
			t.Fatalf("%s %s: %d for a ticket that cannot exist", method, req.URL, rec.Code)
		}
		seg, ok := strings.CutPrefix(p, "/locks/")
		if !ok {
			return // health, metrics
		}
		if method != http.MethodPost {
			t.Fatalf("%s %s: %d with nothing held", method, req.URL, rec.Code)
		}
		key, err := url.PathUnescape(seg)
		if err != nil || strings.Contains(seg, "/") || kit.ValidateKey(key) != nil {
			t.Fatalf("%s %s: %d for key %q", method, req.URL, rec.Code, key)
		}
		if strings.TrimSpace(body) == "" {
			return
		}
		var b struct {
			WaitMS *json.Number `json:"wait_ms"`
		}
		if checkObject([]byte(body)) != nil || json.Unmarshal([]byte(body), &b) != nil {
			t.Fatalf("%s %s: %d for body %q", method, req.URL, rec.Code, body)
		}
		if b.WaitMS != nil {
			if ms, err := b.WaitMS.Int64(); err != nil || ms < 0 || ms > durationMS(DefaultMaxWait) {
				t.Fatalf("%s %s: %d for wait_ms %s", method, req.URL, rec.Code, *b.WaitMS)
			}
		}
	})
}

var discardLogger = slog.New(slog.DiscardHandler)
