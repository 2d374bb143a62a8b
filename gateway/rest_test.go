package gateway

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestRESTLifecycle(t *testing.T) {
	_, srv := startGateway(t, Options{})
	u := srv.URL + "/locks/jobs%2Fnightly"

	// curl -d sends form encoding, which a page of another origin can
	// send too: refused, only JSON is taken.
	if code, m, _ := do(t, "POST", u, "application/x-www-form-urlencoded", `{"client_id":"a","ttl_ms":5000}`); code != 415 || errCode(m) != "unsupported_media_type" {
		t.Fatalf("form-encoded POST = %d %v, want 415", code, m)
	}
	code, a, _ := do(t, "POST", u, "application/json", `{"client_id":"a","ttl_ms":5000}`)
	if code != 200 || a["lock_token"] == "" || a["fencing_token"] == nil || a["key"] != "jobs/nightly" || a["owner"] != "a" {
		t.Fatalf("POST = %d %v", code, a)
	}
	code, m, _ := do(t, "POST", u, "", `{"client_id":"b","ttl_ms":5000}`)
	if code != 409 || errCode(m) != "held" {
		t.Fatalf("second POST = %d %v, want 409 held", code, m)
	}
	if h := m["error"].(map[string]any)["holder"].(map[string]any); h["owner"] != "a" || jsonOf(t, h["fencing_token"]) != jsonOf(t, a["fencing_token"]) || h["expires_in_ms"] == nil {
		t.Errorf("409 names holder %v, want a with token %v", h, a["fencing_token"])
	}
	code, m, _ = do(t, "GET", u, "", "")
	if code != 200 || m["owner"] != "a" || jsonOf(t, m["fencing_token"]) != jsonOf(t, a["fencing_token"]) {
		t.Errorf("GET = %d %v", code, m)
	}
	lease := fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, a["lock_token"], jsonOf(t, a["fencing_token"]))
	code, m, _ = do(t, "PUT", u, "application/json", strings.TrimSuffix(lease, "}")+`,"ttl_ms":9000}`)
	if code != 200 || m["ttl_ms"] != float64(9000) {
		t.Errorf("PUT = %d %v", code, m)
	}
	code, _, _ = do(t, "DELETE", u, "application/json", lease)
	if code != 204 {
		t.Errorf("DELETE = %d, want 204", code)
	}
	code, m, _ = do(t, "DELETE", u, "application/json", lease)
	if code != 409 || errCode(m) != "not_held" {
		t.Errorf("second DELETE = %d %v, want 409 not_held", code, m)
	}
	code, m, _ = do(t, "PUT", u, "application/json", lease)
	if code != 409 || errCode(m) != "not_held" {
		t.Errorf("PUT of a released lease = %d %v, want 409 not_held", code, m)
	}
	code, m, _ = do(t, "GET", u, "", "")
	if code != 404 || errCode(m) != "not_found" {
		t.Errorf("GET after release = %d %v, want 404", code, m)
	}
	// DELETE with query parameters.
	_, a, _ = do(t, "POST", u, "", `{"ttl_ms":5000}`)
	code, _, _ = do(t, "DELETE", fmt.Sprintf("%s?lock_token=%s&fencing_token=%v", u, a["lock_token"], tokenValue(a["fencing_token"])), "", "")
	if code != 204 {
		t.Errorf("DELETE with query = %d", code)
	}
}

func TestRESTTicket(t *testing.T) {
	_, srv := startGateway(t, Options{SyncWindow: 50 * time.Millisecond})
	u := srv.URL + "/locks/k"
	_, a, _ := do(t, "POST", u, "", `{"ttl_ms":60000}`)
	code, m, _ := do(t, "POST", u, "", `{"ttl_ms":60000,"wait_ms":30000}`)
	if code != 202 || m["ticket"] == "" {
		t.Fatalf("waiting POST = %d %v, want 202 with a ticket", code, m)
	}
	poll := srv.URL + m["poll"].(string)
	if code, m, _ := do(t, "GET", poll, "", ""); code != 202 || m["status"] != "waiting" {
		t.Fatalf("poll while held = %d %v", code, m)
	}
	do(t, "DELETE", u, "", fmt.Sprintf(`{"lock_token":%q,"fencing_token":%v}`, a["lock_token"], tokenValue(a["fencing_token"])))
	var g map[string]any
	deadline := time.Now().Add(5 * time.Second)
	for {
		code, g, _ = do(t, "GET", poll, "", "")
		if code == 200 {
			break
		}
		if code != 202 || time.Now().After(deadline) {
			t.Fatalf("poll after release = %d %v", code, g)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if tokenValue(g["fencing_token"]) <= tokenValue(a["fencing_token"]) {
		t.Errorf("ticket grant token %v after %v", g["fencing_token"], a["fencing_token"])
	}
	if code, m, _ := do(t, "GET", poll, "", ""); code != 404 || errCode(m) != "not_found" {
		t.Errorf("second collection = %d %v, want 404", code, m)
	}
	// A ticket whose wait runs out answers 408; a cancelled one frees nothing held.
	code, m, _ = do(t, "POST", u, "", `{"ttl_ms":60000,"wait_ms":100}`)
	if code == 202 {
		time.Sleep(200 * time.Millisecond)
		if code, m, _ := do(t, "GET", srv.URL+m["poll"].(string), "", ""); code != 408 || errCode(m) != "timeout" {
			t.Errorf("expired ticket = %d %v, want 408", code, m)
		}
	} else if code != 408 || errCode(m) != "timeout" {
		t.Errorf("short wait = %d %v, want 408 timeout", code, m)
	}
}

// TestRESTWaitRunsOutInWindow: a wait_ms that runs out within the
// synchronous window is answered 408 timeout, the documented answer for a
// wait that ran out, and not 503 unavailable, which says the outcome is
// unknown (the backend's error for a context that ended: "context
// deadline exceeded"); the key's holder is untouched.
func TestRESTWaitRunsOutInWindow(t *testing.T) {
	_, srv := startGateway(t, Options{SyncWindow: time.Minute})
	u := srv.URL + "/locks/k"
	if code, m, _ := do(t, "POST", u, "", `{"client_id":"a","ttl_ms":60000}`); code != 200 {
		t.Fatalf("first POST = %d %v", code, m)
	}
	for _, wait := range []int{1, 3, 50} {
		code, m, _ := do(t, "POST", u, "", fmt.Sprintf(`{"client_id":"b","ttl_ms":60000,"wait_ms":%d}`, wait))
		if code != 408 || errCode(m) != "timeout" {
			t.Errorf("wait_ms %d on a held key = %d %v, want 408 timeout", wait, code, m)
		}
	}
	if code, m, _ := do(t, "GET", u, "", ""); code != 200 || m["owner"] != "a" {
		t.Errorf("inspect after the waits = %d %v, want a still holding", code, m)
	}
}

// TestRESTErrors: one request per status code.
func TestRESTErrors(t *testing.T) {
	_, srv := startGateway(t, Options{MaxMessageBytes: 1024})
	u := srv.URL + "/locks/k"
	for _, tc := range []struct {
		method, url, ct, body string
		status                int
		code                  string
	}{
		{"POST", u, "application/json", `{"ttl_ms":`, 400, "bad_json"},
		{"POST", u, "application/json", `{"ttl":5}`, 400, "bad_json"},
		{"POST", u, "application/json", `{"ttl_ms":-1}`, 400, "invalid_ttl"},
		{"POST", srv.URL + "/locks/" + strings.Repeat("k", 300), "", `{}`, 400, "invalid_key"},
		{"PUT", u, "application/json", `{"lock_token":"x"}`, 400, "missing_field"},
		{"DELETE", u, "application/json", ``, 400, "missing_field"},
		{"POST", u, "text/plain", `{}`, 415, "unsupported_media_type"},
		{"POST", u, "application/json", `{"value":"` + strings.Repeat("v", 2000) + `"}`, 413, "too_large"},
		{"PATCH", u, "", ``, 405, "method_not_allowed"},
		{"GET", srv.URL + "/nope", "", ``, 404, "not_found"},
		{"GET", srv.URL + "/tickets/nope", "", ``, 404, "not_found"},
		{"PUT", u, "application/json", `{"lock_token":"0123456789abcdef0123456789abcdef","fencing_token":1}`, 409, "not_held"},
		{"PUT", u, "application/json", `{"lock_token":"x","fencing_token":1}`, 400, "invalid_handle"},
		{"POST", u, "application/json", `null`, 400, "bad_json"},
		{"POST", u, "application/json", `{"wait_ms":9223372036855}`, 400, "invalid_wait"},
	} {
		code, m, _ := do(t, tc.method, tc.url, tc.ct, tc.body)
		if code != tc.status || errCode(m) != tc.code {
			t.Errorf("%s %s %q: %d %v, want %d %s", tc.method, tc.url, tc.body, code, m, tc.status, tc.code)
		}
	}
}

func TestHealthAndMetrics(t *testing.T) {
	ready := fmt.Errorf("no leader")
	_, srv := startGateway(t, Options{Ready: func() error { return ready }})
	if code, _, _ := doText(t, srv.URL+"/healthz"); code != 200 {
		t.Errorf("healthz %d", code)
	}
	if code, _, _ := doText(t, srv.URL+"/readyz"); code != 503 {
		t.Errorf("readyz while not ready %d", code)
	}
	ready = nil
	if code, _, _ := doText(t, srv.URL+"/readyz"); code != 200 {
		t.Errorf("readyz when ready %d", code)
	}
	do(t, "POST", srv.URL+"/locks/k", "", `{"ttl_ms":5000}`)
	do(t, "POST", srv.URL+"/locks/k", "", `{"ttl_ms":5000}`)
	c := dial(t, srv)
	c.send(map[string]any{"id": "1", "commandType": 1, "key": "w", "ttl": 60000})
	c.expect("1", "grant", "")
	_, body, _ := doText(t, srv.URL+"/metrics")
	for _, want := range []string{
		`lockgate_grants_total 2`, `lockgate_errors_total{code="held"} 1`, `lockgate_held_locks 1`,
		`lockgate_connections 1`, `lockgate_acquire_seconds_count{protocol="rest"} 1`, `lockgate_waiters 0`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

func doText(t *testing.T, url string) (int, string, http.Header) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp.StatusCode, b.String(), resp.Header
}
