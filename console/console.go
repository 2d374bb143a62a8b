// Package console is the web console of a raftlock node: the page at /ui
// (TypeScript compiled to ES modules, embedded from assets/) and the JSON
// endpoints under /v1/console/ that it reads. docs/console.md is its
// reference: endpoints, security and limits.
//
// The page's sources are in web/; `make console` compiles them (and the
// TypeScript client they import) into assets/, which is committed so that
// `go build` needs no Node.js; the clients harness (go test ./clients)
// checks that assets/ is what the sources compile to.
package console

import (
	"context"
	"embed"
	"encoding/json"
	"io/fs"
	"log/slog"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/lockgate/lockgate/internal/crossorigin"
	"github.com/lockgate/lockgate/internal/nodeview"
	"github.com/lockgate/lockgate/internal/wire"
)

//go:embed all:assets
var assets embed.FS

// Limits of the endpoints (docs/console.md "Limits").
const (
	DefaultPageSize = 50
	MaxPageSize     = 500 // fsm.MaxScanLimit
	MaxSearchBytes  = 256
	MaxQueueListed  = 1000
	// FanOutTimeout bounds the wait for one member's status.
	FanOutTimeout = time.Second
	// LagEntries and LagContact make a member "lagging".
	LagEntries = 1000
	LagContact = 2 * time.Second
	// maxBody bounds a force-release request body.
	maxBody = 4 << 10
	// forwardedHeader marks a request a follower forwarded to the leader,
	// so that the leader answers it itself (no forwarding loops). It is
	// honoured only from a member (forwardedByMember): any client can send
	// it.
	forwardedHeader = "X-Lockgate-Console-Forwarded"
	// identityHeader carries, on a member's forward, the identity of the
	// browser's credential (the leader sees the member's), so that the
	// leader shows what that identity may read.
	identityHeader = "X-Lockgate-Console-Identity"
	// hopsHeader counts the forwards of a request that no member vouched
	// for; past maxHops it is answered where it lands.
	hopsHeader = "X-Lockgate-Console-Hops"
	maxHops    = 5 // as many as a join may be forwarded (raftlock's default)
)

// Path prefixes served.
const (
	PathUI   = "/ui/"
	PathData = "/v1/console/"
	// PathRelay carries the page's WebSocket (the lock protocol, /v1/ws)
	// to the leader: a watch needs the leader, and the page connects to
	// its own node only.
	PathRelay = PathData + "ws"
)

// csp is the page's Content-Security-Policy: its scripts and styles come
// from the node only, it connects to the node only ('self' covers its
// ws:/wss: address too; the event stream reaches the leader through the
// node's relay, PathRelay), and nothing frames it.
const csp = "default-src 'self'; connect-src 'self'; style-src 'self'; script-src 'self'; " +
	"img-src 'self' data:; frame-ancestors 'none'; base-uri 'none'; form-action 'self'"

// Node is what the console reads of the node it serves, and asks of it:
// backend/raftlock's *Node is one. The data are internal/nodeview's types.
type Node interface {
	ID() string
	// APIAddr is the node's own API address; Leader the leader's, "" when
	// none is known.
	APIAddr() string
	IsLeader() bool
	Leader() (id, apiAddr string)
	// StatusView is the node's Raft view of itself (what it serves at
	// nodeview.PathStatus); MembersView the cluster's members.
	StatusView() nodeview.Status
	MembersView() (nodeview.Members, error)
	// Credential judges the credential r carries (its Authorization
	// header's token), CredentialWith a token found elsewhere; false: none
	// that may read the lock table.
	Credential(r *http.Request) (nodeview.Credential, bool)
	CredentialWith(r *http.Request, tok string, hasToken bool) (nodeview.Credential, bool)
	// APIScheme and APITransport are how to reach the members' API
	// addresses ("http" or "https", with the node's client certificate).
	APIScheme() string
	APITransport() http.RoundTripper
	// ScanLocks is a page of the held keys containing q after the key
	// after, in key order, at most limit (1..MaxPageSize) of them.
	ScanLocks(q, after string, limit int) nodeview.LockPage
	// LockDetail is key as ScanLocks shows it, with at most maxQueue of
	// its waiters, in queue order (the leader's; a follower has none).
	LockDetail(key string, maxQueue int) (nodeview.Lock, []nodeview.Waiter, error)
	// ForceRelease frees every holder of key, on the leader; ctx names
	// the caller for the audit trail (audit.WithCaller).
	ForceRelease(ctx context.Context, key string) error
}

// Options configures Mount.
type Options struct {
	Logger *slog.Logger // default slog.Default()
	// Readable, when not nil, says whether identity may see key (the
	// tenants' policy, docs/security.md "Tenants"): the lock table, a
	// key's detail and its queue show a credential only what it may
	// read. An admin credential sees everything. Nil: everything.
	Readable func(identity, key string) bool
	// KeyAdmin, when not nil, says whether identity may force-release
	// key without an admin credential (the policy's admin permission).
	KeyAdmin func(identity, key string) bool
	// Restricted, when not nil, says whether a policy restricts keys now
	// (re-read on every request: a policy reloads on SIGHUP).
	Restricted func() bool
	// Metrics, when not nil, are the node's metrics (its /metrics), which
	// the sparklines' figures are taken from; nil: the node shows none of
	// its own.
	Metrics prometheus.Gatherer
}

// Console serves one node's console.
type Console struct {
	n          Node
	readable   func(identity, key string) bool
	keyAdmin   func(identity, key string) bool
	restricted func() bool
	log        *slog.Logger
	static     http.Handler
	hc         *http.Client
	mux        *http.ServeMux
	gatherer   prometheus.Gatherer
	sampler    sampler
}

// Mount serves the console of n on mux (the node's API address): the
// page at /ui and its data under /v1/console/.
func Mount(mux *http.ServeMux, n Node, opts Options) *Console {
	c := New(n, opts)
	mux.Handle("/ui", c)
	mux.Handle(PathUI, c)
	mux.Handle(PathData, c)
	return c
}

// New returns the console of n as an http.Handler of /ui, /ui/ and
// /v1/console/.
func New(n Node, opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	c := &Console{n: n, readable: opts.Readable, keyAdmin: opts.KeyAdmin, restricted: opts.Restricted, gatherer: opts.Metrics, log: opts.Logger.With("component", "console"),
		static: http.StripPrefix(PathUI, http.FileServerFS(sub)),
		hc:     &http.Client{Transport: n.APITransport(), Timeout: FanOutTimeout}}
	m := http.NewServeMux()
	m.HandleFunc("GET /ui", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, PathUI, http.StatusMovedPermanently)
	})
	m.HandleFunc("GET "+PathUI, c.serveStatic)
	m.HandleFunc("GET "+PathData+"whoami", c.whoami)
	m.HandleFunc("GET "+PathData+"cluster", c.cluster)
	m.HandleFunc("GET "+PathData+"locks", c.locks)
	m.HandleFunc("GET "+PathData+"lock", c.lock)
	m.HandleFunc("POST "+PathData+"force-release", c.forceRelease)
	m.HandleFunc("GET "+pathMetrics, c.metrics)
	m.HandleFunc("GET "+pathNodeMetrics, c.nodeMetrics)
	m.HandleFunc("GET "+PathRelay, c.relay)
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, wire.CodeNotFound, "no such console endpoint: "+r.Method+" "+r.URL.Path+" (see docs/console.md)")
	})
	c.mux = m
	return c
}

// ServeHTTP implements http.Handler.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", csp)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Cache-Control", "no-store")
	if !c.forwardedByMember(r) {
		// Not a member's forward: a client sent the headers, and they
		// count for nothing.
		r.Header.Del(forwardedHeader)
		r.Header.Del(identityHeader)
		if ref := crossorigin.Check(r, nil); ref != nil {
			c.log.Warn("console: cross-site request refused", "method", r.Method, "path", r.URL.Path, "code", ref.Code,
				"origin", r.Header.Get("Origin"), "content_type", r.Header.Get("Content-Type"), "remote", r.RemoteAddr)
			writeError(w, ref.Status, ref.Code, ref.Message)
			return
		}
	}
	c.mux.ServeHTTP(w, r)
}

// forwardedByMember reports whether r says a member forwarded it
// (forwardedHeader) and carries the credential a member forwards with,
// which a browser page cannot make its user's browser send: over TLS, a
// client certificate verified against the cluster CA (the follower's own,
// APITransport; anyone holding one is a member); without
// TLS, an admin token (what authorizes joining the cluster; a follower
// forwards a force-release with the admin token its user presented). A
// client token, or none on an open node, never makes the header count.
// Such a request skips the cross-site check (the member checked the
// page's request) and is answered where it lands (no forwarding loops);
// the audit line names the member and the browser's address it reports.
func (c *Console) forwardedByMember(r *http.Request) bool {
	if r.Header.Get(forwardedHeader) == "" {
		return false
	}
	cred, ok := c.n.Credential(r)
	if !ok {
		return false
	}
	if c.n.APIScheme() == "https" {
		return cred.Kind == "certificate"
	}
	return cred.Kind == "admin-token"
}

func (c *Console) serveStatic(w http.ResponseWriter, r *http.Request) {
	// The page holds no data: anyone may load it, and it asks for a
	// credential before it shows anything.
	c.static.ServeHTTP(w, r)
}

// authorize answers 401 and reports false when r carries no credential
// that may read the lock table.
func (c *Console) authorize(w http.ResponseWriter, r *http.Request) (nodeview.Credential, bool) {
	cred, ok := c.n.Credential(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
		writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized,
			"a credential is required: a bearer token (Authorization: Bearer), an admin token, or a client certificate from the cluster CA")
	}
	return cred, ok
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"code": code, "message": msg}})
}

// identity is the identity r's credential names: the browser's, as the
// member that forwarded r says (identityHeader, honoured only from a
// member: ServeHTTP dropped anyone else's), else cred's own.
func (c *Console) identity(r *http.Request, cred nodeview.Credential) string {
	if id := r.Header.Get(identityHeader); id != "" {
		return id
	}
	return cred.Identity
}

// filtered reports whether r's credential sees the lock table through
// the policy: a policy is in force and the credential is not an admin's
// (or a member forwarded another credential's request).
func (c *Console) filtered(r *http.Request) bool {
	if c.readable == nil || (c.restricted != nil && !c.restricted()) {
		return false
	}
	if r.Header.Get(identityHeader) != "" {
		return true
	}
	cred, ok := c.n.Credential(r)
	return !ok || !cred.Admin
}

// visible returns whether r's credential may see a key.
func (c *Console) visible(r *http.Request) func(key string) bool {
	if !c.filtered(r) {
		return func(string) bool { return true }
	}
	cred, _ := c.n.Credential(r)
	id := c.identity(r, cred)
	return func(key string) bool { return c.readable(id, key) }
}

// browserAddr is the address of the browser behind r: a member's forward
// reports it in X-Forwarded-For.
func browserAddr(r *http.Request) string {
	if r.Header.Get(forwardedHeader) != "" {
		if f := r.Header.Get("X-Forwarded-For"); f != "" {
			return f
		}
	}
	return r.RemoteAddr
}
