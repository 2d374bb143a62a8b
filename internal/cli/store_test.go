package cli

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/testenv"
)

// TestStoreNeedsAuthOffLoopback: a fenced store reachable from other hosts
// without tokens would let anyone write the highest token of a key and lock
// out every legitimate writer. `lockgate store` refuses to start that way
// and names the flags that fix it.
func TestStoreNeedsAuthOffLoopback(t *testing.T) {
	for _, listen := range []string{"0.0.0.0:0", ":0", "[::]:0"} {
		t.Run(listen, func(t *testing.T) {
			type result struct {
				code         int
				out, errText string
			}
			done := make(chan result, 1)
			go func() {
				code, out, errOut := run(t, "store", "--listen", listen, "--data", filepath.Join(t.TempDir(), "data"))
				done <- result{code, out, errOut}
			}()
			var r result
			select {
			case r = <-done:
			case <-time.After(30 * time.Second):
				t.Fatalf("lockgate store --listen %s without --auth-tokens-file is still serving after 30 s", listen)
			}
			if r.code == 0 || strings.Contains(r.out, "listening") {
				t.Fatalf("exit %d, stdout %q: started without authentication on %s", r.code, r.out, listen)
			}
			for _, flag := range []string{"--auth-tokens-file", "--insecure-no-auth"} {
				if !strings.Contains(r.errText, flag) {
					t.Errorf("error %q does not name %s", r.errText, flag)
				}
			}
		})
	}
}

// TestStoreAuthCheck: which listen addresses need tokens, and the two ways
// to satisfy the check. (The tests never bind a wildcard address: that
// would expose the test's store to the network.)
func TestStoreAuthCheck(t *testing.T) {
	for _, c := range []struct {
		listen           string
		tokens, insecure bool
		refused          bool
	}{
		{"127.0.0.1:8000", false, false, false},
		{"127.9.9.9:0", false, false, false},
		{"localhost:8000", false, false, false},
		{"[::1]:0", false, false, false},
		{"0.0.0.0:8000", false, false, true},
		{":8000", false, false, true},
		{"10.1.2.3:8000", false, false, true},
		{"store.internal:8000", false, false, true}, // a name may resolve anywhere
		{"0.0.0.0:8000", true, false, false},
		{"0.0.0.0:8000", false, true, false},
	} {
		err := checkStoreAuth(c.listen, c.tokens, c.insecure)
		if got := errors.Is(err, ErrStoreNoAuth); got != c.refused || (err != nil && !c.refused) {
			t.Errorf("checkStoreAuth(%q, tokens %v, insecure %v) = %v, want refused %v", c.listen, c.tokens, c.insecure, err, c.refused)
		}
	}
}

// TestForgedStoreWriteCLI: `lockgate store --auth-tokens-file` answers a
// write without a token 401 and keeps /healthz open.
func TestForgedStoreWriteCLI(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs lockgate")
	}
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("# store writers\nstore-token-0123456789\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := testenv.BuildLockgate(t)
	addr := startProcess(t, bin, "fenced store listening on ", "store", "--listen", "127.0.0.1:0",
		"--data", filepath.Join(dir, "data"), "--auth-tokens-file", tokens)
	base, _, _ := strings.Cut(addr, " ")

	post := func(token, body string) int {
		t.Helper()
		r, _ := http.NewRequest("POST", base+"/write", strings.NewReader(body))
		if token != "" {
			r.Header.Set("Authorization", "Bearer "+token)
		}
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("store-token-0123456789", `{"clientID": "a", "fencingToken": {"key": "k", "value": 3}, "data": "ok"}`); got != 200 {
		t.Fatalf("write with the token: %d", got)
	}
	forged := `{"clientID": "x", "fencingToken": {"key": "k", "value": 18446744073709551615}, "data": "pwned"}`
	for _, tok := range []string{"", "guess"} {
		if got := post(tok, forged); got != http.StatusUnauthorized {
			t.Fatalf("forged write with token %q: %d, want 401", tok, got)
		}
	}
	if got := post("store-token-0123456789", `{"clientID": "b", "fencingToken": {"key": "k", "value": 4}, "data": "next"}`); got != 200 {
		t.Fatalf("the next holder's write after the forged ones: %d, want 200", got)
	}
	resp, err := http.Get(base + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("/healthz without a token: %d", resp.StatusCode)
	}
}
