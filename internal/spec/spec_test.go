package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/gateway/raftgw"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

const (
	openapiPath = "../../docs/openapi.yaml"
	schemasDir  = "../../docs/schemas"
	testToken   = "spec-test-token-0123456789abcdef"
	// syncWindow is the gateways' REST synchronous window: short, so that
	// the ticket cases take milliseconds (the default, 2 s, is a number the
	// spec does not depend on).
	syncWindow = 100 * time.Millisecond
)

// spec is the loaded, validated machine-readable spec.
type spec struct {
	doc    *openapi3.T
	schema map[string]*jsonschema.Schema // by file name without .json
}

func loadSpec(t testing.TB) *spec {
	t.Helper()
	loader := openapi3.NewLoader()
	doc, err := loader.LoadFromFile(openapiPath)
	if err != nil {
		t.Fatalf("loading %s: %v", openapiPath, err)
	}
	if err := doc.Validate(context.Background()); err != nil {
		t.Fatalf("%s is not a valid OpenAPI document: %v", openapiPath, err)
	}
	if !doc.IsOpenAPI31OrLater() {
		t.Fatalf("%s is OpenAPI %s, not 3.1", openapiPath, doc.OpenAPI)
	}
	s := &spec{doc: doc, schema: map[string]*jsonschema.Schema{}}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	for _, name := range []string{"request", "reply", "grant", "released", "renewed", "info", "cancelled", "error", "wanted", "grants", "event", "unwatched", "session", "sessionRenewed", "sessionClosed"} {
		p, _ := filepath.Abs(filepath.Join(schemasDir, name+".json"))
		sch, err := c.Compile(p)
		if err != nil {
			t.Fatalf("compiling %s: %v", p, err)
		}
		s.schema[name] = sch
	}
	return s
}

// node is the system under test: a three-node raftlock cluster with the
// gateway on every node (as `lockgate node` runs it), and two more
// gateways over the leader's node: one that checks tokens, one with tiny
// limits and an Origin allow-list.
type node struct {
	leader, follower string // API addresses (host:port)
	tokens, limited  string // base URLs
	// Gateways over the in-memory reference locker (base URLs): mem offers
	// every primitive beyond the mutex, bare none, memLimited every one with
	// one watch per connection; they provoke the primitives' messages
	// whatever the raftlock under test offers.
	mem, bare, memLimited string
}

func startNode(t testing.TB) *node {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := raftlock.StartLocalCluster(ctx, 3, t.TempDir(), func(cfg *raftlock.Config) {
		cfg.RaftAddr, cfg.APIAddr = "127.0.0.1:0", "127.0.0.1:0"
		cfg.HeartbeatTimeout = time.Second
		cfg.ElectionTimeout = time.Second
		cfg.LeaderLeaseTimeout = 500 * time.Millisecond
		cfg.CommitTimeout = 5 * time.Millisecond
		cfg.Logger = slog.New(slog.DiscardHandler)
		cfg.RaftLogOutput = io.Discard
	})
	if err != nil {
		t.Fatalf("starting raftlock: %v", err)
	}
	t.Cleanup(c.Shutdown)
	quiet := slog.New(slog.DiscardHandler)
	for _, s := range c.Servers {
		raftgw.Serve(s, gateway.Options{Logger: quiet, SyncWindow: syncWindow})
	}
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	n := &node{leader: l.APIAddr()}
	for _, s := range c.Servers {
		if s.Node == l {
			continue
		}
		n.follower = s.APIAddr()
		// The follower redirects only once it knows the leader's address
		// (the member directory commits right after the election); no
		// event tells us, so poll it.
		for {
			if _, addr := s.Leader(); addr == n.leader {
				break
			}
			if ctx.Err() != nil {
				t.Fatalf("the follower never learned the leader's address")
			}
			time.Sleep(5 * time.Millisecond)
		}
		break
	}
	tok, err := gateway.NewTokens(testToken)
	if err != nil {
		t.Fatal(err)
	}
	gt := gateway.New(l, gateway.Options{Logger: quiet, Tokens: tok})
	st := httptest.NewServer(gt)
	gl := gateway.New(l, gateway.Options{Logger: quiet, SyncWindow: syncWindow,
		MaxWaitersPerConn: 1, MaxLocksPerConn: 1, MaxTicketsPerClient: 1, MaxSessionsPerConn: 1,
		AllowedOrigins: []string{"https://good.example"}})
	sl := httptest.NewServer(gl)
	t.Cleanup(func() { gt.Close(); gl.Close(); st.Close(); sl.Close() })
	n.tokens, n.limited = st.URL, sl.URL
	for _, m := range []struct {
		url      *string
		features lock.Features
		opts     gateway.Options
	}{
		{&n.mem, lock.AllFeatures, gateway.Options{Logger: quiet, SyncWindow: syncWindow}},
		{&n.bare, 0, gateway.Options{Logger: quiet, SyncWindow: syncWindow}},
		{&n.memLimited, lock.AllFeatures, gateway.Options{Logger: quiet, MaxWatchesPerConn: 1}},
	} {
		ml := locktest.NewMemStoreWithFeatures(m.features).NewLocker()
		g := gateway.New(ml, m.opts)
		srv := httptest.NewServer(g)
		t.Cleanup(func() { g.Close(); srv.Close(); ml.Close() })
		*m.url = srv.URL
	}
	return n
}

// TestProtocol drives one node through both protocols.
func TestProtocol(t *testing.T) {
	s := loadSpec(t)
	n := startNode(t)
	t.Run("REST", func(t *testing.T) { testREST(t, s, n) })
	t.Run("WebSocket", func(t *testing.T) { testWS(t, s, n) })
	// The primitives beyond the mutex: on raftlock's leader as far as it announces
	// them (unsupported for the rest), on the reference locker all of them,
	// and unsupported on a gateway over a locker without any.
	for _, target := range []struct{ name, base string }{
		{"raftlock", "http://" + n.leader}, {"mem", n.mem}, {"bare", n.bare},
	} {
		t.Run("Primitives/WebSocket/"+target.name, func(t *testing.T) { testPrimitivesWS(t, s, n, target.base) })
		t.Run("Primitives/REST/"+target.name, func(t *testing.T) { testPrimitivesREST(t, s, n, target.base) })
	}
	// Sessions: on raftlock, and unsupported on a gateway over
	// a locker without them.
	t.Run("Sessions/WebSocket", func(t *testing.T) { testSessionsWS(t, s, n) })
	t.Run("Sessions/REST", func(t *testing.T) { testSessionsREST(t, s, n) })
}

// TestCodesMatchSpec: every code of internal/wire.Codes is in both error
// code enums of the spec, and the enums have no other code.
func TestCodesMatchSpec(t *testing.T) {
	s := loadSpec(t)
	var want []string
	for _, c := range wire.Codes {
		want = append(want, c.Name)
	}
	slices.Sort(want)

	var openapi []string
	for _, v := range s.doc.Components.Schemas["ErrorCode"].Value.Enum {
		openapi = append(openapi, v.(string))
	}
	var common struct {
		Defs struct {
			ErrorCode struct {
				Enum []string `json:"enum"`
			} `json:"errorCode"`
		} `json:"$defs"`
	}
	data, err := os.ReadFile(filepath.Join(schemasDir, "common.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &common); err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string][]string{
		"docs/openapi.yaml components.schemas.ErrorCode": openapi,
		"docs/schemas/common.json $defs.errorCode":       common.Defs.ErrorCode.Enum,
	} {
		got = slices.Clone(got)
		slices.Sort(got)
		for _, c := range want {
			if _, ok := slices.BinarySearch(got, c); !ok {
				t.Errorf("%s lacks code %q of internal/wire.Codes", name, c)
			}
		}
		for _, c := range got {
			if _, ok := slices.BinarySearch(want, c); !ok {
				t.Errorf("%s has code %q, which internal/wire.Codes does not", name, c)
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s has %d codes, internal/wire.Codes %d", name, len(got), len(want))
		}
	}
}

// TestWrongResponsesFail: the validators reject what the spec forbids, so
// that a passing TestProtocol means something. A grant with a bare-integer
// fencing token (the shape before v1) must fail both specs.
func TestWrongResponsesFail(t *testing.T) {
	s := loadSpec(t)
	const lt = "0123456789abcdef0123456789abcdef"
	const bare, object = `4242`, `{"key":"k","value":4242}`
	restGrant := `{"key":"k","owner":"a","lock_token":"` + lt + `","fencing_token":%s,"ttl_ms":5000}`
	wsGrant := `{"id":"1","type":"grant","success":true,"key":"k","fencingToken":%s,"lockToken":"` + lt + `","ttl":5000,"owner":"a"}`
	good, goodWS := fmt.Sprintf(restGrant, object), fmt.Sprintf(wsGrant, object)
	restGrant, wsGrant = fmt.Sprintf(restGrant, bare), fmt.Sprintf(wsGrant, bare)

	check := func(name string, err error, wantFail bool) {
		t.Helper()
		if wantFail && err == nil {
			t.Errorf("%s: validated, want a failure", name)
		}
		if !wantFail && err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
	check("REST grant, token {key, value}", s.restResponse(t, "POST", "/locks/{key}", 200, good, nil), false)
	check("REST grant, bare-integer token", s.restResponse(t, "POST", "/locks/{key}", 200, restGrant, nil), true)
	check("REST grant, undocumented field", s.restResponse(t, "POST", "/locks/{key}", 200, strings.Replace(good, `{"key"`, `{"extra":1,"key"`, 1), nil), true)
	check("REST undocumented status", s.restResponse(t, "POST", "/locks/{key}", 418, `{"error":{"code":"held","message":"x"}}`, nil), true)
	check("REST unknown error code", s.restResponse(t, "POST", "/locks/{key}", 409, `{"error":{"code":"nope","message":"x"}}`, nil), true)
	check("REST 401 without WWW-Authenticate", s.restResponse(t, "GET", "/metrics", 401, `{"error":{"code":"unauthorized","message":"x"}}`, http.Header{}), true)
	check("WebSocket grant, token {key, value}", s.frame(goodWS), false)
	check("WebSocket grant, bare-integer token", s.frame(wsGrant), true)
	check("WebSocket grant without lockToken", s.frame(strings.Replace(goodWS, `"lockToken":"`+lt+`",`, "", 1)), true)
	check("WebSocket error with an unknown code", s.frame(`{"type":"error","success":false,"error":{"code":"nope","message":"x"}}`), true)
	check("WebSocket message of an unknown type", s.frame(`{"type":"granted","success":true}`), true)
	check("WebSocket request renew without fencingToken", s.request(`{"commandType":3,"key":"k","lockToken":"`+lt+`"}`), true)

	// The primitives' messages.
	overflow := `{"id":"w","type":"event","success":false,"key":"k","event":"error","error":{"code":"watch_overflow","message":"m"}}`
	check("WebSocket watch_overflow event", s.frame(overflow), false)
	check("WebSocket error event claiming success", s.frame(strings.Replace(overflow, `"success":false`, `"success":true`, 1)), true)
	check("WebSocket event of an unknown kind", s.frame(`{"id":"w","type":"event","success":true,"key":"k","event":"renewed"}`), true)
	check("WebSocket granted event without a token", s.frame(`{"id":"w","type":"event","success":true,"key":"k","event":"granted","owner":"o"}`), true)
	check("WebSocket event without the watch's id", s.frame(`{"type":"event","success":true,"key":"k","event":"synced"}`), true)
	check("WebSocket grant with mode exclusive (absent means exclusive)", s.frame(strings.Replace(goodWS, `"owner":"a"`, `"owner":"a","mode":"exclusive"`, 1)), true)
	check("WebSocket grants without leases", s.frame(`{"id":"1","type":"grants","success":true,"leases":[]}`), true)
	check("WebSocket unsupported naming an unknown feature", s.frame(`{"type":"error","success":false,"error":{"code":"unsupported","message":"m","feature":"teleport"}}`), true)
	check("WebSocket request keys on a try-acquire", s.request(`{"commandType":5,"key":"k","keys":["a"]}`), true)
	check("WebSocket request acquireAll with key", s.request(`{"commandType":7,"key":"k","keys":["a"]}`), true)
	check("WebSocket request watch without id", s.request(`{"commandType":9,"key":"k"}`), true)
	// The prefix watch's (the console's watch of every key).
	check("WebSocket request prefix watch of every key", s.request(`{"id":"p","commandType":9,"key":"","prefix":true}`), false)
	check("WebSocket request prefix watch without key", s.request(`{"id":"p","commandType":9,"prefix":true}`), false)
	check("WebSocket request watch without prefix, empty key", s.request(`{"id":"p","commandType":9,"key":"","prefix":false}`), true)
	check("WebSocket request watch without prefix or key", s.request(`{"id":"p","commandType":9,"prefix":false}`), true)
	check("WebSocket request prefix on an acquire", s.request(`{"id":"p","commandType":5,"key":"k","prefix":true}`), true)
	check("WebSocket request prefix not a boolean", s.request(`{"id":"p","commandType":9,"key":"k","prefix":"yes"}`), true)
	check("WebSocket request prefix with a control character", s.request(`{"id":"p","commandType":9,"key":"a\u0001","prefix":true}`), true)
	check("WebSocket synced of the prefix \"\" (no key)", s.frame(`{"id":"w","type":"event","success":true,"event":"synced","revision":5}`), false)
	check("WebSocket granted event without its key", s.frame(`{"id":"w","type":"event","success":true,"event":"granted","fencingToken":{"key":"k","value":1}}`), true)
	check("WebSocket unwatched of the prefix \"\" (no key)", s.frame(`{"id":"u","type":"unwatched","success":true}`), false)
	check("WebSocket unsupported naming watchprefix", s.frame(`{"id":"p","type":"error","success":false,"error":{"code":"unsupported","message":"m","feature":"watchprefix"}}`), false)
	check("REST acquireAll, a lease with a bare-integer token", s.restResponse(t, "POST", "/locks", 200, `{"leases":[`+restGrant+`]}`, nil), true)
	check("REST acquireAll", s.restResponse(t, "POST", "/locks", 200, `{"leases":[`+good+`]}`, nil), false)
	check("REST delayed with retry_in_ms", s.restResponse(t, "POST", "/locks/{key}", 409, `{"error":{"code":"delayed","message":"x","retry_in_ms":5}}`, nil), false)

	// The sessions' messages.
	session := `{"id":"s","type":"session","success":true,"sessionId":"` + lt + `","ttl":5000}`
	check("WebSocket session", s.frame(session), false)
	check("WebSocket session without sessionId", s.frame(strings.Replace(session, `"sessionId":"`+lt+`",`, "", 1)), true)
	check("WebSocket session with a malformed sessionId", s.frame(strings.Replace(session, lt, "S-1", 1)), true)
	check("WebSocket sessionRenewed without ttl", s.frame(`{"id":"s","type":"sessionRenewed","success":true,"sessionId":"`+lt+`"}`), true)
	check("WebSocket sessionClosed", s.frame(`{"id":"s","type":"sessionClosed","success":true,"sessionId":"`+lt+`"}`), false)
	check("WebSocket sessionClosed with an undocumented field", s.frame(`{"id":"s","type":"sessionClosed","success":true,"sessionId":"`+lt+`","ttl":5}`), true)
	check("WebSocket grant in a session", s.frame(strings.Replace(goodWS, `"owner":"a"`, `"owner":"a","sessionId":"`+lt+`"`, 1)), false)
	check("WebSocket request renewSession without sessionId", s.request(`{"commandType":12}`), true)
	check("WebSocket request sessionId on an inspect", s.request(`{"commandType":4,"key":"k","sessionId":"`+lt+`"}`), true)
	check("REST session", s.restResponse(t, "POST", "/sessions", 201, `{"session_id":"`+lt+`","ttl_ms":5000}`, nil), false)
	check("REST session without ttl_ms", s.restResponse(t, "POST", "/sessions", 201, `{"session_id":"`+lt+`"}`, nil), true)
	check("REST renewSession as 201", s.restResponse(t, "POST", "/sessions/renew", 201, `{"session_id":"`+lt+`","ttl_ms":5000}`, nil), true)
	check("REST session_expired", s.restResponse(t, "POST", "/sessions/renew", 409, `{"error":{"code":"session_expired","message":"x"}}`, nil), false)
}

// restResponse validates a response made up by the test against the
// operation at method and path.
func (s *spec) restResponse(t testing.TB, method, path string, status int, body string, h http.Header) error {
	req := httptest.NewRequest(method, "http://x"+strings.Replace(path, "{key}", "k", 1), nil)
	if h == nil {
		h = http.Header{"Www-Authenticate": {`Bearer realm="lockgate"`}}
	}
	h.Set("Content-Type", "application/json")
	in := s.input(t, req, path, map[string]string{"key": "k"})
	out := &openapi3filter.ResponseValidationInput{RequestValidationInput: in, Status: status, Header: h, Options: in.Options}
	out.SetBodyBytes([]byte(body))
	return openapi3filter.ValidateResponse(context.Background(), out)
}

// input is the validation input of req, sent to the spec's path template.
func (s *spec) input(t testing.TB, req *http.Request, path string, params map[string]string) *openapi3filter.RequestValidationInput {
	t.Helper()
	item := s.doc.Paths.Value(path)
	if item == nil {
		t.Fatalf("the spec has no path %s", path)
	}
	op := item.GetOperation(req.Method)
	if op == nil {
		t.Fatalf("the spec has no %s %s", req.Method, path)
	}
	return &openapi3filter.RequestValidationInput{
		Request: req, PathParams: params,
		Route: &routers.Route{Spec: s.doc, Path: path, PathItem: item, Method: req.Method, Operation: op},
		Options: &openapi3filter.Options{
			AuthenticationFunc:    openapi3filter.NoopAuthenticationFunc,
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
}

// frame validates a server message against docs/schemas/reply.json.
func (s *spec) frame(text string) error { return s.validate("reply", text) }

// request validates a client message against docs/schemas/request.json.
func (s *spec) request(text string) error { return s.validate("request", text) }

func (s *spec) validate(schema, text string) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(text)))
	if err != nil {
		return err
	}
	return s.schema[schema].Validate(v)
}
