package spec

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
)

// What the spec must say of a request the test sends.
const (
	reqValid   = iota // the spec accepts it (also a well-formed request the server refuses for its state: held, not_held…)
	reqInvalid        // the spec refuses it, as the server does
	reqSkip           // beyond a schema (a lone surrogate decodes to U+FFFD; a JSON body sent as form encoding)
)

// call is one REST request and what the docs promise for it.
type call struct {
	base   string // default: the leader
	method string
	path   string // the spec's path template
	key    string // {key}, path-escaped into the URL
	ticket string // {ticket}
	query  string
	body   string
	ctype  string // default application/json when there is a body; "-" for none
	header http.Header
	req    int
	status int
	code   string // the error code, for an error status
	// waiting, for a poll: a 202 (still waiting) is also a right answer.
	waiting bool
}

type restClient struct {
	t      *testing.T
	s      *spec
	n      *node
	client *http.Client
	last   int // the status of the last response
}

// do sends c, checks its status and code, validates the request and the
// response against the spec, and returns the decoded JSON body (nil if
// none).
func (r *restClient) do(name string, c call) map[string]any {
	t := r.t
	t.Helper()
	base := c.base
	if base == "" {
		base = "http://" + r.n.leader
	}
	path := strings.Replace(c.path, "{key}", url.PathEscape(c.key), 1)
	path = strings.Replace(path, "{ticket}", url.PathEscape(c.ticket), 1)
	if c.query != "" {
		path += "?" + c.query
	}
	build := func() *http.Request {
		var body io.Reader
		if c.body != "" {
			body = strings.NewReader(c.body)
		}
		req, err := http.NewRequest(c.method, base+path, body)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range c.header {
			req.Header[k] = v
		}
		switch {
		case c.ctype == "-":
		case c.ctype != "":
			req.Header.Set("Content-Type", c.ctype)
		case c.body != "":
			req.Header.Set("Content-Type", "application/json")
		}
		return req
	}
	resp, err := r.client.Do(build())
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	data, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatalf("%s: reading the body: %v", name, err)
	}
	r.last = resp.StatusCode
	if c.waiting && resp.StatusCode == http.StatusAccepted {
		c.status, c.code = http.StatusAccepted, ""
	}
	if resp.StatusCode != c.status {
		t.Errorf("%s: %s %s answered %d %s, the docs promise %d", name, c.method, path, resp.StatusCode, data, c.status)
	}
	var body map[string]any
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
		if err := json.Unmarshal(data, &body); err != nil {
			t.Errorf("%s: the body is not a JSON object: %v: %s", name, err, data)
		}
	}
	if c.code != "" {
		e, _ := body["error"].(map[string]any)
		if got, _ := e["code"].(string); got != c.code {
			t.Errorf("%s: code %q (%s), the docs promise %q", name, got, data, c.code)
		}
	}

	params := map[string]string{"key": c.key, "ticket": c.ticket}
	in := r.s.input(t, build(), c.path, params)
	if err := openapi3filter.ValidateRequest(context.Background(), in); c.req == reqValid && err != nil {
		t.Errorf("%s: the spec refuses the request, which the server takes for well-formed: %v", name, err)
	} else if c.req == reqInvalid && err == nil {
		t.Errorf("%s: the spec accepts the request, which the server refuses: %s %s %s", name, c.method, path, c.body)
	}
	in.Request = build() // ValidateRequest read the body
	if resp.StatusCode == http.StatusTemporaryRedirect {
		// openapi3filter never validates a 307: check it by hand.
		r.component(name, "Redirect", resp, data)
		return body
	}
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: resp.StatusCode, Header: resp.Header, Options: in.Options}
	out.SetBodyBytes(data)
	if err := openapi3filter.ValidateResponse(context.Background(), out); err != nil {
		t.Errorf("%s: %s %s: the response does not match docs/openapi.yaml: %v\nbody: %s", name, c.method, path, err, data)
	}
	return body
}

// component validates a response that no operation of the spec can name
// (a method the path does not have, a route that does not exist, a 307)
// against the spec's reusable response name: its required headers and
// its JSON body.
func (r *restClient) component(name, component string, resp *http.Response, data []byte) {
	t := r.t
	t.Helper()
	ref := r.s.doc.Components.Responses[component]
	if ref == nil || ref.Value == nil {
		t.Fatalf("the spec has no response component %s", component)
	}
	for h, hr := range ref.Value.Headers {
		if hr.Value.Required && resp.Header.Get(h) == "" {
			t.Errorf("%s: no %s header, which the spec requires (%s)", name, h, component)
		}
	}
	mt := ref.Value.Content.Get(resp.Header.Get("Content-Type"))
	if mt == nil {
		t.Errorf("%s: Content-Type %q is not the spec's (%s)", name, resp.Header.Get("Content-Type"), component)
		return
	}
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		t.Errorf("%s: %v", name, err)
		return
	}
	if err := mt.Schema.Value.VisitJSON(v, openapi3.EnableJSONSchema2020(), openapi3.VisitAsResponse()); err != nil {
		t.Errorf("%s: the body does not match the spec's %s: %v\nbody: %s", name, component, err, data)
	}
}

// raw sends a request outside the spec's operations and validates the
// answer against a response component.
func (r *restClient) raw(name, method, url string, status int, component string) {
	r.t.Helper()
	req, _ := http.NewRequest(method, url, nil)
	resp, err := r.client.Do(req)
	if err != nil {
		r.t.Fatal(err)
	}
	data, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != status {
		r.t.Errorf("%s: %s %s answered %d %s, the docs promise %d", name, method, url, resp.StatusCode, data, status)
	}
	r.component(name, component, resp, data)
}

func ftOf(t *testing.T, grant map[string]any) (lt string, value int64, ft string) {
	t.Helper()
	lt, _ = grant["lock_token"].(string)
	f, _ := grant["fencing_token"].(map[string]any)
	v, _ := f["value"].(float64)
	if lt == "" || v == 0 {
		t.Fatalf("a grant without lock_token or fencing_token.value: %v", grant)
	}
	b, _ := json.Marshal(f)
	return lt, int64(v), string(b)
}

func testREST(t *testing.T, s *spec, n *node) {
	r := &restClient{t: t, s: s, n: n, client: &http.Client{
		Timeout:       10 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
	const locks = "/locks/{key}"
	const tickets = "/tickets/{ticket}"
	auth := http.Header{"Authorization": {"Bearer " + testToken}}

	// Health and metrics.
	r.do("healthz", call{method: "GET", path: "/healthz", status: 200})
	r.do("readyz", call{method: "GET", path: "/readyz", status: 200})
	r.do("readyz on a follower", call{base: "http://" + n.follower, method: "GET", path: "/readyz", status: 200})
	r.do("metrics", call{method: "GET", path: "/metrics", status: 200})

	// Acquire, inspect, renew (every accepted token shape), release.
	g := r.do("acquire", call{method: "POST", path: locks, key: "r/a", status: 200,
		body: `{"client_id":"alice","ttl_ms":5000,"value":"v1","wait_ms":0,"lock_token":"0123456789abcdef0123456789abcdef"}`})
	lt, tv, ft := ftOf(t, g)
	gb := r.do("acquire without a body", call{method: "POST", path: locks, key: "r/b", status: 200, ctype: "-"})
	ltb, _, ftb := ftOf(t, gb)
	r.do("held", call{method: "POST", path: locks, key: "r/b", body: `{"client_id":"bob"}`, status: 409, code: "held"})
	r.do("curl -d's form encoding, which a page of another origin can send", call{method: "POST", path: locks, key: "r/b", body: `{"client_id":"bob"}`,
		ctype: "application/x-www-form-urlencoded", req: reqSkip, status: 415, code: "unsupported_media_type"})
	r.do("inspect", call{method: "GET", path: locks, key: "r/a", status: 200})
	r.do("renew", call{method: "PUT", path: locks, key: "r/a", status: 200,
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s,"ttl_ms":6000}`, lt, ft)})
	r.do("renew, the bare integer token of before v1", call{method: "PUT", path: locks, key: "r/a", status: 200,
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%d}`, lt, tv)})
	r.do("renew, the token as a string", call{method: "PUT", path: locks, key: "r/a", status: 200,
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":"%d"}`, lt, tv)})
	r.do("renew, fencing_token of another key", call{method: "PUT", path: locks, key: "r/a", status: 400, code: "bad_json",
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":{"key":"other","value":%d}}`, lt, tv)})
	r.do("release", call{method: "DELETE", path: locks, key: "r/a", status: 204,
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, lt, ft)})
	r.do("renew after release", call{method: "PUT", path: locks, key: "r/a", status: 409, code: "not_held",
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, lt, ft)})
	r.do("release after release", call{method: "DELETE", path: locks, key: "r/a", status: 409, code: "not_held",
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, lt, ft)})
	r.do("inspect, not held", call{method: "GET", path: locks, key: "r/a", status: 404, code: "not_found"})
	g = r.do("acquire for a query release", call{method: "POST", path: locks, key: "r/c", body: `{}`, status: 200})
	lt2, tv2, _ := ftOf(t, g)
	r.do("release by query", call{method: "DELETE", path: locks, key: "r/c", status: 204,
		query: fmt.Sprintf("lock_token=%s&fencing_token=%d", lt2, tv2)})

	// Tickets: r/b is held (above).
	tk := r.do("wait: a ticket", call{method: "POST", path: locks, key: "r/b", body: `{"wait_ms":60000}`, status: 202})
	id, _ := tk["ticket"].(string)
	r.do("poll, waiting", call{method: "GET", path: tickets, ticket: id, status: 202})
	r.raw("ticket, method not allowed", "PATCH", "http://"+n.leader+"/tickets/"+id, 405, "MethodNotAllowed")
	r.do("inspect, a waiter", call{method: "GET", path: locks, key: "r/b", status: 200})
	r.do("release to the ticket", call{method: "DELETE", path: locks, key: "r/b", status: 204,
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, ltb, ftb)})
	r.poll("poll, granted", id, 200, "")
	r.do("poll, collected", call{method: "GET", path: tickets, ticket: id, status: 404, code: "not_found"})
	tk = r.do("wait: a ticket to cancel", call{method: "POST", path: locks, key: "r/b", body: `{"wait_ms":60000}`, status: 202})
	id, _ = tk["ticket"].(string)
	r.do("cancel the ticket", call{method: "DELETE", path: tickets, ticket: id, status: 204})
	r.do("poll, cancelled", call{method: "GET", path: tickets, ticket: id, status: 404, code: "not_found"})
	r.do("cancel an unknown ticket", call{method: "DELETE", path: tickets, ticket: "nope", status: 404, code: "not_found"})
	tk = r.do("wait: a ticket to time out", call{method: "POST", path: locks, key: "r/b",
		body: fmt.Sprintf(`{"wait_ms":%d}`, 3*syncWindow/time.Millisecond), status: 202})
	id, _ = tk["ticket"].(string)
	r.poll("poll, timed out", id, 408, "timeout")

	// Refused requests: every code a test can provoke.
	long := strings.Repeat("k", 257)
	for _, c := range []struct {
		name string
		call
	}{
		{"null body", call{method: "POST", path: locks, key: "e", body: `null`, req: reqInvalid, status: 400, code: "bad_json"}},
		{"array body", call{method: "POST", path: locks, key: "e", body: `[]`, req: reqInvalid, status: 400, code: "bad_json"}},
		{"not JSON", call{method: "POST", path: locks, key: "e", body: `x`, req: reqInvalid, status: 400, code: "bad_json"}},
		{"unknown field", call{method: "POST", path: locks, key: "e", body: `{"tll":5000}`, req: reqInvalid, status: 400, code: "bad_json"}},
		{"field in another case", call{method: "POST", path: locks, key: "e-case", body: `{"TTL_MS":5000}`, req: reqInvalid, status: 400, code: "bad_json"}},
		// openapi3filter reads the first JSON value of a body and ignores the rest.
		{"trailing data", call{method: "POST", path: locks, key: "e", body: `{} {}`, req: reqSkip, status: 400, code: "bad_json"}},
		{"wrong type", call{method: "POST", path: locks, key: "e", body: `{"ttl_ms":"5000"}`, req: reqInvalid, status: 400, code: "bad_json"}},
		{"lone surrogate", call{method: "POST", path: locks, key: "e", body: `{"client_id":"a\ud800"}`, req: reqSkip, status: 400, code: "bad_json"}},
		{"renew without a body", call{method: "PUT", path: locks, key: "e", ctype: "-", req: reqInvalid, status: 400, code: "missing_field"}},
		{"renew without fencing_token", call{method: "PUT", path: locks, key: "e", body: `{"lock_token":"0123456789abcdef0123456789abcdef"}`, req: reqInvalid, status: 400, code: "missing_field"}},
		{"release without lock_token", call{method: "DELETE", path: locks, key: "e", body: `{"fencing_token":1}`, req: reqInvalid, status: 400, code: "missing_field"}},
		{"key too long", call{method: "POST", path: locks, key: long, req: reqInvalid, status: 400, code: "invalid_key"}},
		{"key with a control character", call{method: "GET", path: locks, key: "a\x01b", req: reqInvalid, status: 400, code: "invalid_key"}},
		{"renew, key too long", call{method: "PUT", path: locks, key: long, body: `{"lock_token":"0123456789abcdef0123456789abcdef","fencing_token":1}`, req: reqInvalid, status: 400, code: "invalid_key"}},
		{"ttl too short", call{method: "POST", path: locks, key: "e", body: `{"ttl_ms":5}`, req: reqInvalid, status: 400, code: "invalid_ttl"}},
		{"ttl negative", call{method: "POST", path: locks, key: "e", body: `{"ttl_ms":-1}`, req: reqInvalid, status: 400, code: "invalid_ttl"}},
		{"ttl over 24 h", call{method: "POST", path: locks, key: "e", body: `{"ttl_ms":86400001}`, req: reqInvalid, status: 400, code: "invalid_ttl"}},
		{"renew, ttl too short", call{method: "PUT", path: locks, key: "e", body: `{"lock_token":"0123456789abcdef0123456789abcdef","fencing_token":1,"ttl_ms":5}`, req: reqInvalid, status: 400, code: "invalid_ttl"}},
		{"value too long", call{method: "POST", path: locks, key: "e", body: `{"value":"` + strings.Repeat("v", 4097) + `"}`, req: reqInvalid, status: 400, code: "invalid_value"}},
		{"owner too long", call{method: "POST", path: locks, key: "e", body: `{"client_id":"` + strings.Repeat("o", 129) + `"}`, req: reqInvalid, status: 400, code: "invalid_owner"}},
		{"owner with a control character", call{method: "POST", path: locks, key: "e", body: `{"client_id":"a\u0001"}`, req: reqInvalid, status: 400, code: "invalid_owner"}},
		{"handle not hex", call{method: "POST", path: locks, key: "e", body: `{"lock_token":"xyz"}`, req: reqInvalid, status: 400, code: "invalid_handle"}},
		{"renew, handle upper case", call{method: "PUT", path: locks, key: "e", body: `{"lock_token":"0123456789ABCDEF0123456789ABCDEF","fencing_token":1}`, req: reqInvalid, status: 400, code: "invalid_handle"}},
		{"release by query, bad handle", call{method: "DELETE", path: locks, key: "e", query: "lock_token=xyz&fencing_token=1", req: reqInvalid, status: 400, code: "invalid_handle"}},
		{"release by query, token not a number", call{method: "DELETE", path: locks, key: "e", query: "lock_token=0123456789abcdef0123456789abcdef&fencing_token=x", req: reqInvalid, status: 400, code: "bad_json"}},
		{"wait negative", call{method: "POST", path: locks, key: "e", body: `{"wait_ms":-1}`, req: reqInvalid, status: 400, code: "invalid_wait"}},
		{"wait over 5 min", call{method: "POST", path: locks, key: "e", body: `{"wait_ms":300001}`, req: reqInvalid, status: 400, code: "invalid_wait"}},
		{"body over 64 KiB", call{method: "POST", path: locks, key: "e", body: `{"value":"` + strings.Repeat("v", 70<<10) + `"}`, req: reqInvalid, status: 413, code: "too_large"}},
		{"text/plain", call{method: "POST", path: locks, key: "e", body: `{}`, ctype: "text/plain", req: reqInvalid, status: 415, code: "unsupported_media_type"}},
		{"not_held, a token never granted", call{method: "PUT", path: locks, key: "e", body: `{"lock_token":"0123456789abcdef0123456789abcdef","fencing_token":{"key":"e","value":1}}`, status: 409, code: "not_held"}},
		{"a follower redirects", call{base: "http://" + n.follower, method: "POST", path: locks, key: "e", body: `{}`, status: 307, code: "not_leader"}},
		{"a follower redirects inspect", call{base: "http://" + n.follower, method: "GET", path: locks, key: "e", status: 307, code: "not_leader"}},
		{"unauthorized, no token", call{base: n.tokens, method: "POST", path: locks, key: "e", body: `{}`, status: 401, code: "unauthorized"}},
		{"unauthorized, wrong token", call{base: n.tokens, method: "GET", path: locks, key: "e", header: http.Header{"Authorization": {"Bearer " + strings.Repeat("x", 32)}}, status: 401, code: "unauthorized"}},
		{"unauthorized, another scheme", call{base: n.tokens, method: "GET", path: locks, key: "e", header: http.Header{"Authorization": {"Basic " + testToken}}, status: 401, code: "unauthorized"}},
		{"unauthorized metrics", call{base: n.tokens, method: "GET", path: "/metrics", status: 401, code: "unauthorized"}},
		{"authorized metrics", call{base: n.tokens, method: "GET", path: "/metrics", header: auth, status: 200}},
		{"authorized inspect", call{base: n.tokens, method: "GET", path: locks, key: "e", header: auth, status: 404, code: "not_found"}},
		{"healthz needs no token", call{base: n.tokens, method: "GET", path: "/healthz", status: 200}},
		{"readyz needs no token", call{base: n.tokens, method: "GET", path: "/readyz", status: 200}},
		{"unknown ticket", call{method: "GET", path: tickets, ticket: "nope", status: 404, code: "not_found"}},
		{"a page of another origin", call{base: n.limited, method: "POST", path: locks, key: "e", body: `{}`, header: http.Header{"Origin": {"https://evil.example"}}, status: 403, code: "forbidden"}},
	} {
		r.do(c.name, c.call)
	}
	r.raw("locks, method not allowed", "PATCH", "http://"+n.leader+"/locks/e", 405, "MethodNotAllowed")
	r.raw("unknown route", "GET", "http://"+n.leader+"/nope", 404, "NotFound")

	// too_many_tickets: the limited gateway allows one ticket per client.
	g = r.do("limited: acquire", call{base: n.limited, method: "POST", path: locks, key: "r/t", body: `{}`, status: 200})
	tk = r.do("limited: the one ticket", call{base: n.limited, method: "POST", path: locks, key: "r/t", body: `{"wait_ms":60000}`, status: 202})
	r.do("limited: too many tickets", call{base: n.limited, method: "POST", path: locks, key: "r/t", body: `{"wait_ms":60000}`, status: 429, code: "too_many_tickets"})
	id, _ = tk["ticket"].(string)
	r.do("limited: cancel the ticket", call{base: n.limited, method: "DELETE", path: tickets, ticket: id, status: 204})
	ltt, _, ftt := ftOf(t, g)
	r.do("limited: release", call{base: n.limited, method: "DELETE", path: locks, key: "r/t", status: 204,
		body: fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, ltt, ftt)})
}

// poll polls a ticket until it is no longer waiting (the protocol's own
// way to await it: a poll collects a finished ticket), validating every
// answer, and checks the final one.
func (r *restClient) poll(name, id string, status int, code string) {
	r.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		r.do(name, call{method: "GET", path: "/tickets/{ticket}", ticket: id, status: status, code: code, waiting: true})
		if r.last != http.StatusAccepted {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("%s: the ticket still waits after 10 s", name)
		}
		time.Sleep(5 * time.Millisecond) // a client's poll interval
	}
}
