package fencedstore

import (
	"context"
	"errors"
	"math"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
)

// serveAuth starts the handler on 127.0.0.1 behind a bearer token check that
// accepts only token.
func serveAuth(t *testing.T, token string) (*Store, string) {
	t.Helper()
	s := openT(t, filepath.Join(t.TempDir(), "data"))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	authorize := func(r *http.Request) bool { return r.Header.Get("Authorization") == "Bearer "+token }
	srv := &http.Server{Handler: NewHandler(s, HandlerOptions{Authorize: authorize})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return s, "http://" + ln.Addr().String()
}

// TestForgedHighTokenNeedsAuth: a stranger's write of the highest possible
// token would refuse every legitimate writer of the key forever (durably).
// Without a valid token it is 401, the connection is closed, and the key's
// highest token does not move.
func TestForgedHighTokenNeedsAuth(t *testing.T) {
	const token = "store-token-0123456789"
	s, url := serveAuth(t, token)
	ctx := context.Background()
	good := NewClient(url, nil, WithToken(token))
	if err := good.Write(ctx, WriteRequest{ClientID: "holder", Token: FencingToken{Key: "k", Value: 5}, Data: "v5"}); err != nil {
		t.Fatalf("legitimate write: %v", err)
	}

	forged := `{"clientID": "intruder", "fencingToken": {"key": "k", "value": 18446744073709551615}, "data": "pwned"}`
	for name, auth := range map[string]string{
		"no credentials": "",
		"wrong token":    "Bearer not-" + token,
		"wrong scheme":   "Basic " + token,
		"bare token":     token,
	} {
		t.Run(name, func(t *testing.T) {
			r, _ := http.NewRequest("POST", url+"/write", strings.NewReader(forged))
			if auth != "" {
				r.Header.Set("Authorization", auth)
			}
			resp, body := do(t, r)
			wantStatus(t, resp.StatusCode, http.StatusUnauthorized, body, CodeUnauthorized)
			if !resp.Close {
				t.Error("401 without Connection: close: the stranger keeps the connection")
			}
			if resp.Header.Get("WWW-Authenticate") == "" {
				t.Error("401 without WWW-Authenticate")
			}
		})
	}
	// The Go client with a wrong token gets an error matching ErrUnauthorized.
	bad := NewClient(url, nil, WithToken("nope"))
	err := bad.Write(ctx, WriteRequest{ClientID: "intruder", Token: FencingToken{Key: "k", Value: math.MaxUint64}, Data: "pwned"})
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("client with a wrong token: err = %v, want ErrUnauthorized", err)
	}
	if _, _, err := NewClient(url, nil).Read(ctx, "k"); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("read without a token: err = %v, want ErrUnauthorized", err)
	}
	if _, err := NewClient(url, nil).Stats(ctx); !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("stats without a token: err = %v, want ErrUnauthorized", err)
	}

	if rec, _ := s.Read("k"); rec.Token.Value != 5 || rec.Data != "v5" {
		t.Fatalf("after the forged writes the key holds %+v, want token 5", rec)
	}
	if st := s.Stats(); st.Accepted != 1 || st.Rejected != 0 {
		t.Fatalf("Stats %+v: a refused request reached the store", st)
	}
	// The legitimate writers are still accepted.
	if err := good.Write(ctx, WriteRequest{ClientID: "next", Token: FencingToken{Key: "k", Value: 6}, Data: "v6"}); err != nil {
		t.Fatalf("next legitimate write: %v", err)
	}
	if rec, found, err := good.Read(ctx, "k"); err != nil || !found || rec.Token.Value != 6 {
		t.Fatalf("Read = %+v, %v, %v", rec, found, err)
	}
	// The health check stays open for load balancers.
	r, _ := http.NewRequest("GET", url+"/healthz", nil)
	if resp, body := do(t, r); resp.StatusCode != http.StatusOK {
		t.Fatalf("/healthz without a token: %d %v", resp.StatusCode, body)
	}
}
