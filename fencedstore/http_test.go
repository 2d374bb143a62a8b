package fencedstore

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// serve starts the handler on 127.0.0.1 and returns its base URL.
func serve(t *testing.T) (*Store, string) {
	t.Helper()
	s := openT(t, filepath.Join(t.TempDir(), "data"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: NewHandler(s, HandlerOptions{})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s, "http://" + ln.Addr().String()
}

// call sends one request and decodes the JSON answer.
func call(t *testing.T, method, url, body string) (int, map[string]any) {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, m := do(t, r)
	return resp.StatusCode, m
}

// do sends r and decodes the JSON answer, which must be an object.
func do(t *testing.T, r *http.Request) (*http.Response, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("%s %s: Content-Type %q", r.Method, r.URL, ct)
	}
	b, _ := io.ReadAll(resp.Body)
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("%s %s: %d, body %q is not a JSON object", r.Method, r.URL, resp.StatusCode, b)
	}
	return resp, m
}

func wantStatus(t *testing.T, status, want int, body map[string]any, code string) {
	t.Helper()
	if status != want {
		t.Fatalf("status %d, want %d (body %v)", status, want, body)
	}
	if code == "" {
		return
	}
	e, _ := body["error"].(map[string]any)
	if body["success"] != false || e == nil || e["code"] != code || e["message"] == "" {
		t.Fatalf("body %v, want success false and error code %q with a message", body, code)
	}
}

const seedWrite = `{"clientID": "client-1", "fencingToken": {"key": "k", "value": 12}, "data": "hello"}`

func TestHTTP200(t *testing.T) {
	s, url := serve(t)
	status, body := call(t, "POST", url+"/write", seedWrite)
	wantStatus(t, status, 200, body, "")
	if len(body) != 1 || body["success"] != true {
		t.Fatalf("body %v, want exactly {\"success\": true}", body)
	}
	wantRead := map[string]any{"key": "k", "data": "hello", "clientID": "client-1",
		"fencingToken": map[string]any{"key": "k", "value": 12.0}}
	status, body = call(t, "GET", url+"/read/k", "")
	wantStatus(t, status, 200, body, "")
	if b1, b2 := mustJSON(body), mustJSON(wantRead); b1 != b2 {
		t.Fatalf("GET /read/k = %s, want %s", b1, b2)
	}
	status, body = call(t, "GET", url+"/stats", "")
	wantStatus(t, status, 200, body, "")
	if body["accepted"] != 1.0 || body["keys"] != 1.0 {
		t.Fatalf("stats %v", body)
	}
	status, body = call(t, "GET", url+"/healthz", "")
	wantStatus(t, status, 200, body, "")
	if _, ok := s.Read("k"); !ok {
		t.Fatal("write not in the store")
	}
}

func mustJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestHTTP400(t *testing.T) {
	_, url := serve(t)
	for body, code := range map[string]string{
		`{"clientID": "c", "fencingToken": {"key": "k", "value": -1}}`: CodeBadJSON,
		`{"clientID": "c", "fencingToken": `:                           CodeBadJSON,
		seedWrite + ` {}`:                                              CodeBadJSON,
		`{"clientID": "c", "fencingToken": {"value": 1}}`:              CodeInvalidKey,
		`{"fencingToken": {"key": "k", "value": 1}}`:                   CodeInvalidClientID,
	} {
		status, resp := call(t, "POST", url+"/write", body)
		wantStatus(t, status, 400, resp, code)
	}
}

// TestWriteInputRefused: keys follow the lock keys' rules (kit.ValidateKey),
// and a body is exactly one JSON object of the documented fields. Each
// refusal has its own code and leaves the store untouched.
func TestWriteInputRefused(t *testing.T) {
	s, url := serve(t)
	// write builds a body around a key, given as JSON string content.
	write := func(key string) string {
		return `{"clientID": "c", "data": "x", "fencingToken": {"key": "` + key + `", "value": 1}}`
	}
	const ok = `"clientID": "c", "data": "x"`
	cases := []struct {
		name, body, code string
	}{
		{"escaped newline in key", write(`a\nb`), CodeInvalidKey},
		{"escaped NUL in key", write(`a\u0000`), CodeInvalidKey},
		{"escaped DEL in key", write(`a\u007f`), CodeInvalidKey},
		{"raw tab in key", write("a\tb"), CodeBadJSON}, // JSON forbids raw control characters in strings
		{"invalid UTF-8 in key", write("a\xff"), CodeInvalidKey},
		{"lone surrogate in key", write(`a\ud800`), CodeInvalidKey},
		{"empty key", write(""), CodeInvalidKey},
		{"key too long", write(strings.Repeat("k", MaxKeyLen+1)), CodeInvalidKey},
		{"control character in clientID", `{"clientID": "c\r", "fencingToken": {"key": "k", "value": 1}}`, CodeInvalidClientID},
		{"invalid UTF-8 in clientID", "{\"clientID\": \"c\xfe\", \"fencingToken\": {\"key\": \"k\", \"value\": 1}}", CodeInvalidClientID},
		{"invalid UTF-8 in data", "{\"clientID\": \"c\", \"data\": \"x\xfe\", \"fencingToken\": {\"key\": \"k\", \"value\": 1}}", CodeBadJSON},
		{"unknown field", `{` + ok + `, "fencingToken": {"key": "k", "value": 1}, "admin": true}`, CodeBadJSON},
		{"unknown token field", `{` + ok + `, "fencingToken": {"key": "k", "value": 1, "epoch": 2}}`, CodeBadJSON},
		{"null", `null`, CodeBadJSON},
		{"null with spaces", " null \n", CodeBadJSON},
		{"null token", `{` + ok + `, "fencingToken": null}`, CodeInvalid},
		{"no token value", `{` + ok + `, "fencingToken": {"key": "k"}}`, CodeInvalid},
		{"array", `[]`, CodeBadJSON},
		{"trailing object", write("k") + `{}`, CodeBadJSON},
		{"trailing garbage", write("k") + ` x`, CodeBadJSON},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, resp := call(t, "POST", url+"/write", c.body)
			wantStatus(t, status, 400, resp, c.code)
		})
	}
	if st := s.Stats(); st.Accepted != 0 || st.Rejected != 0 || st.Keys != 0 {
		t.Fatalf("Stats %+v: a refused write reached the store", st)
	}
	// The Go API refuses the same keys, matchably.
	for _, key := range []string{"a\nb", "a\xff", "a\x7f", "\x00"} {
		_, err := s.Write(context.Background(), WriteRequest{ClientID: "c", Token: FencingToken{Key: key, Value: 1}})
		if !errors.Is(err, ErrInvalidKey) || !errors.Is(err, ErrInvalid) {
			t.Errorf("Write(key %q): err = %v, want ErrInvalidKey", key, err)
		}
	}
}

func TestHTTP404(t *testing.T) {
	_, url := serve(t)
	status, body := call(t, "GET", url+"/read/nobody", "")
	wantStatus(t, status, 404, body, CodeNotFound)
}

func TestHTTP405(t *testing.T) {
	_, url := serve(t)
	for _, c := range [][2]string{{"GET", "/write"}, {"PUT", "/write"}, {"POST", "/read/k"}, {"DELETE", "/stats"}} {
		status, body := call(t, c[0], url+c[1], "")
		wantStatus(t, status, 405, body, CodeMethodNotAllowed)
	}
}

func TestHTTP409(t *testing.T) {
	s, url := serve(t)
	call(t, "POST", url+"/write", seedWrite)
	status, body := call(t, "POST", url+"/write", `{"clientID": "late", "fencingToken": {"key": "k", "value": 11}, "data": "stale"}`)
	wantStatus(t, status, 409, body, CodeStaleToken)
	e := body["error"].(map[string]any)
	if e["key"] != "k" || e["token"] != 11.0 || e["highest"] != 12.0 ||
		!strings.Contains(e["message"].(string), "11") || !strings.Contains(e["message"].(string), "12") {
		t.Fatalf("error %v: want key, token 11 and highest 12, both named in the message", e)
	}
	if rec, _ := s.Read("k"); rec.Data != "hello" {
		t.Fatalf("stale write reached the store: %+v", rec)
	}
	if st := s.Stats(); st.Rejected != 1 || st.RejectedByKey["k"] != 1 {
		t.Fatalf("Stats %+v", st)
	}
}

func TestHTTP413(t *testing.T) {
	s, url := serve(t)
	huge := `{"clientID": "c", "fencingToken": {"key": "k", "value": 1}, "data": "` + strings.Repeat("x", MaxBodyBytes) + `"}`
	status, body := call(t, "POST", url+"/write", huge)
	wantStatus(t, status, 413, body, CodeTooLarge)
	// Without a Content-Length the limit is enforced while reading.
	r, _ := http.NewRequest("POST", url+"/write", io.MultiReader(strings.NewReader(huge)))
	r.ContentLength = -1
	resp, err := http.DefaultClient.Do(r)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 {
		t.Fatalf("chunked oversized body: status %d", resp.StatusCode)
	}
	if st := s.Stats(); st.Accepted != 0 {
		t.Fatalf("Stats %+v", st)
	}
}

func TestClient(t *testing.T) {
	_, url := serve(t)
	c := NewClient(url+"/", nil)
	ctx := context.Background()
	key := "orders/eu west"
	if err := c.Write(ctx, WriteRequest{ClientID: "a", Token: FencingToken{Key: key, Value: 7}, Data: "v7"}); err != nil {
		t.Fatal(err)
	}
	err := c.Write(ctx, WriteRequest{ClientID: "b", Token: FencingToken{Key: key, Value: 6}, Data: "v6"})
	var se *StaleTokenError
	if !errors.Is(err, ErrStaleToken) || !errors.As(err, &se) || *se != (StaleTokenError{Key: key, Token: 6, Highest: 7}) {
		t.Fatalf("stale write: err = %#v", err)
	}
	if err := c.Write(ctx, WriteRequest{Token: FencingToken{Key: key, Value: 8}}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("invalid write: err = %v", err)
	}
	rec, found, err := c.Read(ctx, key)
	if err != nil || !found || rec != (Record{Key: key, Data: "v7", ClientID: "a", Token: FencingToken{Key: key, Value: 7}}) {
		t.Fatalf("Read = %+v, %v, %v", rec, found, err)
	}
	if _, found, err := c.Read(ctx, "missing"); found || err != nil {
		t.Fatalf("Read(missing) = %v, %v", found, err)
	}
	st, err := c.Stats(ctx)
	if err != nil || st.Accepted != 1 || st.Rejected != 1 || st.RejectedByKey[key] != 1 || st.Keys != 1 {
		t.Fatalf("Stats = %+v, %v", st, err)
	}
}
