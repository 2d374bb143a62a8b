package gateway

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestCheckStateChanging: the cross-site check, request by request — what
// a browser page of another origin can send without a CORS preflight is
// refused, what programs and the server's own pages send passes.
func TestCheckStateChanging(t *testing.T) {
	const host = "127.0.0.1:50050"
	const body = `{"client_id":"x","ttl_ms":86400000}`
	for _, tc := range []struct {
		name    string
		method  string
		body    string
		chunked bool // a body of unknown length
		hdr     []string
		allowed []string
		host    string // the request's Host, if not host
		code    string // "" passes
	}{
		// What a program sends.
		{name: "JSON POST", method: "POST", body: body, hdr: []string{"Content-Type", "application/json"}},
		{name: "JSON with charset", method: "POST", body: body, hdr: []string{"Content-Type", "application/json; charset=utf-8"}},
		{name: "JSON type in capitals", method: "PUT", body: body, hdr: []string{"Content-Type", "Application/JSON"}},
		{name: "bodiless POST", method: "POST"},
		{name: "bodiless DELETE", method: "DELETE"},
		{name: "bodiless DELETE typed JSON", method: "DELETE", hdr: []string{"Content-Type", "application/json"}},
		{name: "chunked JSON", method: "POST", body: body, chunked: true, hdr: []string{"Content-Type", "application/json"}},
		// Reads are never checked: CORS keeps their answers from other pages.
		{name: "GET from another origin", method: "GET", hdr: []string{"Origin", "http://evil.example"}},
		{name: "HEAD typed as a form", method: "HEAD", hdr: []string{"Content-Type", "text/plain"}},
		{name: "OPTIONS preflight", method: "OPTIONS", hdr: []string{"Origin", "http://evil.example"}},

		// Bodies a page can send cross-origin without a preflight.
		{name: "text/plain form", method: "POST", body: body, hdr: []string{"Content-Type", "text/plain"}, code: "unsupported_media_type"},
		{name: "url-encoded (curl -d)", method: "POST", body: body, hdr: []string{"Content-Type", "application/x-www-form-urlencoded"}, code: "unsupported_media_type"},
		{name: "multipart form", method: "POST", body: body, hdr: []string{"Content-Type", "multipart/form-data; boundary=x"}, code: "unsupported_media_type"},
		{name: "body without Content-Type", method: "POST", body: body, code: "unsupported_media_type"},
		{name: "chunked without Content-Type", method: "POST", body: body, chunked: true, code: "unsupported_media_type"},
		{name: "DELETE with a text body", method: "DELETE", body: body, hdr: []string{"Content-Type", "text/plain"}, code: "unsupported_media_type"},
		{name: "PUT without Content-Type", method: "PUT", body: body, code: "unsupported_media_type"},
		{name: "PATCH typed as a form", method: "PATCH", body: body, hdr: []string{"Content-Type", "text/plain;charset=UTF-8"}, code: "unsupported_media_type"},
		{name: "empty form post", method: "POST", hdr: []string{"Content-Type", "text/plain"}, code: "unsupported_media_type"},
		{name: "JSON-like type", method: "POST", body: body, hdr: []string{"Content-Type", "application/json-patch+json"}, code: "unsupported_media_type"},
		{name: "malformed type", method: "POST", body: body, hdr: []string{"Content-Type", "application/json;;"}, code: "unsupported_media_type"},
		{name: "unknown method with a body", method: "FROB", body: body, code: "unsupported_media_type"},

		// Origins.
		{name: "same origin", method: "POST", body: body, hdr: []string{"Origin", "http://" + host, "Content-Type", "application/json"}},
		{name: "same origin, host in capitals", method: "POST", host: "localhost:50050", hdr: []string{"Origin", "http://LOCALHOST:50050"}},
		{name: "another port", method: "POST", body: body, hdr: []string{"Origin", "http://127.0.0.1:8000", "Content-Type", "application/json"}, code: "forbidden"},
		{name: "another host", method: "DELETE", hdr: []string{"Origin", "https://evil.example"}, code: "forbidden"},
		{name: "foreign origin beats the body's type", method: "POST", body: body, hdr: []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, code: "forbidden"},
		{name: "null origin", method: "POST", hdr: []string{"Origin", "null"}, code: "forbidden"},
		{name: "not http", method: "POST", hdr: []string{"Origin", "file://" + host}, code: "forbidden"},
		{name: "allowed origin", method: "POST", body: body, allowed: []string{"https://app.example"}, hdr: []string{"Origin", "https://app.example", "Content-Type", "application/json"}},
		{name: "allowed origin, other case and slash", method: "POST", allowed: []string{"https://App.example/"}, hdr: []string{"Origin", "https://app.example"}},
		{name: "not in the list", method: "POST", allowed: []string{"https://app.example"}, hdr: []string{"Origin", "https://evil.example"}, code: "forbidden"},
		{name: "a list's prefix is not a match", method: "POST", allowed: []string{"https://app.example"}, hdr: []string{"Origin", "https://app.example.evil.example"}, code: "forbidden"},
		{name: "any origin", method: "POST", allowed: []string{"*"}, hdr: []string{"Origin", "https://evil.example"}},
		{name: "any origin still needs JSON", method: "POST", body: body, allowed: []string{"*"}, hdr: []string{"Origin", "https://evil.example", "Content-Type", "text/plain"}, code: "unsupported_media_type"},

		// Sec-Fetch-Site, when a browser withholds Origin.
		{name: "cross-site without Origin", method: "POST", hdr: []string{"Sec-Fetch-Site", "cross-site"}, code: "forbidden"},
		{name: "same-site without Origin", method: "POST", hdr: []string{"Sec-Fetch-Site", "same-site"}, code: "forbidden"},
		{name: "same-origin without Origin", method: "POST", hdr: []string{"Sec-Fetch-Site", "same-origin"}},
		{name: "user-initiated without Origin", method: "POST", hdr: []string{"Sec-Fetch-Site", "none"}},
		{name: "cross-site, any origin allowed", method: "POST", allowed: []string{"*"}, hdr: []string{"Sec-Fetch-Site", "cross-site"}},
		{name: "cross-site, a list", method: "POST", allowed: []string{"https://app.example"}, hdr: []string{"Sec-Fetch-Site", "cross-site"}, code: "forbidden"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := httptest.NewRequest(tc.method, "http://"+host+"/locks/k", strings.NewReader(tc.body))
			if tc.chunked {
				r.ContentLength = -1
			}
			for i := 0; i+1 < len(tc.hdr); i += 2 {
				r.Header.Set(tc.hdr[i], tc.hdr[i+1])
			}
			if tc.host != "" {
				r.Host = tc.host
			}
			code, msg, ok := CheckStateChanging(r, tc.allowed)
			if ok != (tc.code == "") || code != tc.code {
				t.Fatalf("CheckStateChanging = %q, %q, %v; want code %q", code, msg, ok, tc.code)
			}
			if !ok && !strings.Contains(msg, "Cross-site requests") {
				t.Errorf("message %q does not point at the documentation", msg)
			}
		})
	}
}

// TestSameOriginPorts: an Origin without a port names the scheme's
// default; the Host of a request on it may or may not name it.
func TestSameOriginPorts(t *testing.T) {
	for _, tc := range []struct {
		origin, host string
		same         bool
	}{
		{"http://example.com", "example.com", true},
		{"http://example.com", "example.com:80", true},
		{"https://example.com", "example.com:443", true},
		{"http://example.com:8080", "example.com:8080", true},
		{"http://[::1]:8080", "[::1]:8080", true},
		{"http://example.com", "example.com:8080", false},
		{"https://example.com", "example.com:80", false},
		{"http://example.com:8080", "example.com", false},
		{"http://example.com.", "example.com", false},
		{"http://user@example.com", "example.com", false},
		{"http://example.com/path", "example.com", false},
		{"ws://example.com", "example.com", false},
		{"example.com", "example.com", false},
		{"", "", false},
	} {
		r := httptest.NewRequest("POST", "http://"+tc.host+"/locks", nil)
		if tc.host == "" {
			r.Host = ""
		}
		r.Header.Set("Origin", tc.origin)
		_, _, ok := CheckStateChanging(r, nil)
		if tc.origin == "" {
			ok = false // no Origin: a program, which passes whatever the host
		}
		if ok != tc.same {
			t.Errorf("Origin %q at Host %q: same origin %v, want %v", tc.origin, tc.host, ok, tc.same)
		}
	}
}

// TestRESTRefusesCrossSite: the REST API refuses what a page of another
// origin can send without a preflight — a form-typed body that would have
// taken a 24-hour lock, a foreign Origin — and the lock stays free; JSON
// from a program and from the gateway's own origin is served.
func TestRESTRefusesCrossSite(t *testing.T) {
	_, srv := startGateway(t, Options{})
	u := srv.URL + "/locks/k"
	body := `{"client_id":"x","ttl_ms":86400000}`
	for _, tc := range []struct {
		name, method, contentType, origin string
		status                            int
		code                              string
	}{
		{"no-cors fetch typed as a form", "POST", "application/x-www-form-urlencoded", "http://evil.example", 403, "forbidden"},
		{"form-typed body, no Origin", "POST", "application/x-www-form-urlencoded", "", 415, "unsupported_media_type"},
		{"text/plain form post", "POST", "text/plain", "", 415, "unsupported_media_type"},
		{"body without Content-Type", "POST", "", "", 415, "unsupported_media_type"},
		{"JSON from another origin", "POST", "application/json", "http://evil.example", 403, "forbidden"},
	} {
		req, err := http.NewRequest(tc.method, u, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		if tc.contentType != "" {
			req.Header.Set("Content-Type", tc.contentType)
		}
		if tc.origin != "" {
			req.Header.Set("Origin", tc.origin)
		}
		code, m := sendRequest(t, req)
		if code != tc.status || errCode(m) != tc.code {
			t.Errorf("%s: %d %v, want %d %s", tc.name, code, m, tc.status, tc.code)
		}
	}
	if code, m, _ := do(t, "GET", u, "", ""); code != 404 || errCode(m) != "not_found" {
		t.Fatalf("after the refusals: GET = %d %v, want the lock free (404 not_found)", code, m)
	}
	if code, m, _ := do(t, "POST", u, "application/json", body); code != 200 {
		t.Fatalf("JSON POST from a program = %d %v, want 200", code, m)
	}
	req, _ := http.NewRequest("DELETE", srv.URL+"/locks/k2", nil)
	req.Header.Set("Origin", srv.URL)
	if code, m := sendRequest(t, req); code != 400 || errCode(m) != "missing_field" {
		t.Errorf("bodiless DELETE from the gateway's own origin = %d %v, want it past the check (400 missing_field)", code, m)
	}
}

// sendRequest sends req and returns the status and the decoded JSON body.
func sendRequest(t *testing.T, req *http.Request) (int, map[string]any) {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, m
}
