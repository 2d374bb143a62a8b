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
	"bytes"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"net/http/httputil"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/lockgate/lockgate/backend/raftlock"
	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/crossorigin"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
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
	maxHops    = raftlock.DefaultMaxJoinHops
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
}

// Console serves one node's console.
type Console struct {
	n          *raftlock.Node
	readable   func(identity, key string) bool
	keyAdmin   func(identity, key string) bool
	restricted func() bool
	log        *slog.Logger
	static     http.Handler
	hc         *http.Client
	mux        *http.ServeMux
}

// Mount serves the console on s's API address: the page at /ui and its
// data under /v1/console/.
func Mount(s *raftlock.Server, opts Options) *Console {
	c := New(s.Node, opts)
	s.Mux.Handle("/ui", c)
	s.Mux.Handle(PathUI, c)
	s.Mux.Handle(PathData, c)
	return c
}

// New returns the console of n as an http.Handler of /ui, /ui/ and
// /v1/console/.
func New(n *raftlock.Node, opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	sub, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	c := &Console{n: n, readable: opts.Readable, keyAdmin: opts.KeyAdmin, restricted: opts.Restricted, log: opts.Logger.With("component", "console"),
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
// APITransport; anyone holding one is a member, raftlock.TLS); without
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
func (c *Console) authorize(w http.ResponseWriter, r *http.Request) (raftlock.Credential, bool) {
	cred, ok := c.n.Credential(r)
	if !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
		writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized,
			"a credential is required: a bearer token (Authorization: Bearer), an admin token, or a client certificate from the cluster CA")
	}
	return cred, ok
}

type whoamiReply struct {
	Node       string `json:"node"`
	Admin      bool   `json:"admin"`
	Credential string `json:"credential"`
}

func (c *Console) whoami(w http.ResponseWriter, r *http.Request) {
	cred, ok := c.authorize(w, r)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, whoamiReply{Node: c.n.ID(), Admin: cred.Admin, Credential: cred.Kind})
}

// memberView is one member in the cluster view.
type memberView struct {
	raftlock.NodeStatus
	Voter      bool   `json:"voter"`
	LagEntries int64  `json:"lagEntries"`
	Lagging    bool   `json:"lagging"`
	Error      string `json:"error"`
}

type clusterReply struct {
	Node       string       `json:"node"`
	LeaderID   string       `json:"leaderId"`
	LeaderAddr string       `json:"leaderAddr"`
	Term       uint64       `json:"term"`
	Nodes      []memberView `json:"nodes"`
}

func (c *Console) cluster(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	pl, err := c.n.Peers()
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, err.Error())
		return
	}
	self := c.n.Status()
	rep := clusterReply{Node: c.n.ID(), LeaderID: pl.LeaderID, LeaderAddr: pl.LeaderAddr, Term: pl.Term}
	ids := make([]string, 0, len(pl.PeerAddress))
	for id := range pl.PeerAddress {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	rep.Nodes = make([]memberView, len(ids))
	var wg sync.WaitGroup
	for i, id := range ids {
		m := &rep.Nodes[i]
		m.ID, m.RaftAddr, m.APIAddr = id, pl.PeerAddress[id], pl.APIAddress[id]
		m.Voter = slices.Contains(pl.Voters, id)
		if id == self.ID {
			m.NodeStatus = self
			continue
		}
		wg.Go(func() {
			st, err := c.memberStatus(r, m.APIAddr)
			if err != nil {
				m.State, m.Error = "unreachable", err.Error()
				return
			}
			st.RaftAddr = m.RaftAddr
			m.NodeStatus = st
		})
	}
	wg.Wait()
	var leaderCommit uint64
	for _, m := range rep.Nodes {
		if m.ID == rep.LeaderID && m.Error == "" {
			leaderCommit = m.CommitIndex
		}
	}
	for i := range rep.Nodes {
		m := &rep.Nodes[i]
		if m.Error != "" {
			m.Lagging = true
			continue
		}
		if leaderCommit > 0 {
			m.LagEntries = int64(leaderCommit) - int64(m.AppliedIndex)
		}
		m.Lagging = m.LagEntries > LagEntries ||
			(m.State != "leader" && (m.LastContactMs < 0 || time.Duration(m.LastContactMs)*time.Millisecond > LagContact))
	}
	writeJSON(w, http.StatusOK, rep)
}

// memberStatus asks the member at apiAddr for its own status, with the
// caller's credential (a member checks it as this node does).
func (c *Console) memberStatus(r *http.Request, apiAddr string) (raftlock.NodeStatus, error) {
	var st raftlock.NodeStatus
	if apiAddr == "" {
		return st, errors.New("no API address known")
	}
	ctx, cancel := context.WithTimeout(r.Context(), FanOutTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.n.APIScheme()+"://"+apiAddr+raftlock.PathStatus, nil)
	if err != nil {
		return st, err
	}
	if a := r.Header.Get("Authorization"); a != "" {
		req.Header.Set("Authorization", a)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		return st, fmt.Errorf("%s answered %s", apiAddr, resp.Status)
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 64<<10)).Decode(&st); err != nil {
		return st, fmt.Errorf("%s: %w", apiAddr, err)
	}
	return st, nil
}

// holderJSON and lockJSON are the JSON of raftlock's console views.
type holderJSON struct {
	Owner       string `json:"owner"`
	Token       string `json:"token"`
	ExpiresInMs int64  `json:"expiresInMs"`
	Value       string `json:"value"`
}

type lockJSON struct {
	Key     string       `json:"key"`
	Mode    string       `json:"mode"`
	Permits int          `json:"permits"`
	Waiters int          `json:"waiters"`
	DelayMs int64        `json:"delayMs"`
	Holders []holderJSON `json:"holders"`
}

// lockDetailJSON is one key with its queue.
type lockDetailJSON struct {
	lockJSON
	Queue []waiterJSON `json:"queue"`
}

type waiterJSON struct {
	Owner     string   `json:"owner"`
	Mode      string   `json:"mode"`
	Permits   int      `json:"permits"`
	Keys      []string `json:"keys"`
	WaitingMs int64    `json:"waitingMs"`
}

type locksReply struct {
	Total        int        `json:"total"`
	Matched      int        `json:"matched"`
	Next         string     `json:"next"`
	WaitersKnown bool       `json:"waitersKnown"`
	Node         string     `json:"node"`
	ScanMs       float64    `json:"scanMs"`
	Locks        []lockJSON `json:"locks"`
	// Filtered: the page shows only the keys the credential's identity
	// may read, and total and matched count those of the page only.
	Filtered bool `json:"filtered,omitempty"`
}

func modeName(m lock.Mode) string {
	if m == lock.ModeShared {
		return wire.ModeShared
	}
	return wire.ModeExclusive
}

func lockOf(l raftlock.ConsoleLock) lockJSON {
	j := lockJSON{Key: l.Key, Mode: modeName(l.Mode), Permits: l.Permits, Waiters: l.Waiters,
		DelayMs: l.Delay.Milliseconds(), Holders: make([]holderJSON, 0, len(l.Holders))}
	for _, h := range l.Holders {
		j.Holders = append(j.Holders, holderJSON{Owner: h.Owner, Token: strconv.FormatUint(uint64(h.Token), 10),
			ExpiresInMs: max(h.ExpiresIn.Milliseconds(), 0), Value: strings.ToValidUTF8(string(h.Value), string(utf8.RuneError))})
	}
	return j
}

func (c *Console) locks(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	q := r.URL.Query()
	search, after := q.Get("q"), q.Get("after")
	if len(search) > MaxSearchBytes {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, fmt.Sprintf("q is %d bytes, the most is %d", len(search), MaxSearchBytes))
		return
	}
	if len(after) > lock.MaxKeyLen {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, fmt.Sprintf("after is %d bytes, longer than any key (%d)", len(after), lock.MaxKeyLen))
		return
	}
	limit := DefaultPageSize
	if s := q.Get("limit"); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > MaxPageSize {
			writeError(w, http.StatusBadRequest, wire.CodeInvalidValue, fmt.Sprintf("limit %q: want 1 to %d", s, MaxPageSize))
			return
		}
		limit = n
	}
	if c.forward(w, r) {
		return
	}
	page := c.n.ScanLocks(search, after, limit)
	rep := locksReply{Total: page.Total, Matched: page.Matched, Next: page.Next, WaitersKnown: page.WaitersKnown,
		Node: c.n.ID(), ScanMs: float64(page.Scan.Microseconds()) / 1000, Locks: make([]lockJSON, 0, len(page.Locks))}
	visible := c.visible(r)
	for _, l := range page.Locks {
		if visible(l.Key) {
			rep.Locks = append(rep.Locks, lockOf(l))
		}
	}
	if c.filtered(r) {
		// The counts would say how many keys other tenants hold.
		rep.Total, rep.Matched, rep.Filtered = len(rep.Locks), len(rep.Locks), true
	}
	writeJSON(w, http.StatusOK, rep)
}

func (c *Console) lock(w http.ResponseWriter, r *http.Request) {
	if _, ok := c.authorize(w, r); !ok {
		return
	}
	key := r.URL.Query().Get("key")
	if err := lock.ValidateKey(key); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, err.Error())
		return
	}
	if !c.visible(r)(key) {
		writeError(w, http.StatusForbidden, wire.CodeForbidden, "this credential's identity may not read key "+strconv.Quote(key)+" (the policy's rules)")
		return
	}
	if c.forward(w, r) {
		return
	}
	l, queue, err := c.n.LockDetail(key, MaxQueueListed)
	if err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, err.Error())
		return
	}
	j := lockDetailJSON{lockJSON: lockOf(l)}
	j.Queue = make([]waiterJSON, 0, len(queue))
	for _, q := range queue {
		j.Queue = append(j.Queue, waiterJSON{Owner: q.Owner, Mode: modeName(q.Mode), Permits: q.Permits, Keys: q.Keys,
			WaitingMs: q.Waiting.Milliseconds()})
	}
	writeJSON(w, http.StatusOK, j)
}

// forward sends a read that needs the leader's queues to the leader, when
// this node is a follower that knows it, and reports whether it did. A
// request a member forwarded is answered where it lands; one that others
// forwarded (or claim to have), after maxHops forwards.
//
// The forwarded request carries no Origin or Sec-Fetch-* headers: this
// node checked them (ServeHTTP), and to the leader the browser's page is
// another origin; the leader would refuse a force-release that a client
// token or an open node forwards (forwardedByMember).
func (c *Console) forward(w http.ResponseWriter, r *http.Request) bool {
	if c.n.IsLeader() || r.Header.Get(forwardedHeader) != "" {
		return false
	}
	hops, _ := strconv.Atoi(r.Header.Get(hopsHeader))
	if hops < 0 || hops >= maxHops {
		return false
	}
	_, addr := c.n.Leader()
	if addr == "" {
		return false
	}
	target := &url.URL{Scheme: c.n.APIScheme(), Host: addr}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.SetXForwarded() // the audit line names the browser's address
			pr.Out.Header.Set(forwardedHeader, c.n.ID())
			if cred, ok := c.n.Credential(pr.In); ok && !cred.Admin {
				pr.Out.Header.Set(identityHeader, c.identity(pr.In, cred))
			}
			pr.Out.Header.Set(hopsHeader, strconv.Itoa(hops+1))
			stripBrowserHeaders(pr.Out.Header)
		},
		Transport: c.n.APITransport(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "the leader at "+addr+" did not answer: "+err.Error())
		},
	}
	p.ServeHTTP(w, r)
	return true
}

type forceBody struct {
	Key string `json:"key"`
}

type forceReply struct {
	Key      string `json:"key"`
	Released int    `json:"released"`
}

func (c *Console) forceRelease(w http.ResponseWriter, r *http.Request) {
	cred, ok := c.authorize(w, r)
	if !ok {
		return
	}
	// ServeHTTP refused a page of another origin and a body not typed
	// JSON; a force-release needs a body, so its type is checked again.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		writeError(w, http.StatusUnsupportedMediaType, wire.CodeUnsupportedMediaType, "send the body as Content-Type: application/json")
		return
	}
	raw, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			writeError(w, http.StatusRequestEntityTooLarge, wire.CodeTooLarge, fmt.Sprintf("body over %d bytes", maxBody))
			return
		}
		writeError(w, http.StatusBadRequest, wire.CodeBadJSON, "body: "+err.Error())
		return
	}
	var b forceBody
	if err := decodeObject(raw, &b); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeBadJSON, "body: want {\"key\": \"...\"}: "+err.Error())
		return
	}
	if err := lock.ValidateKey(b.Key); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeInvalidKey, err.Error())
		return
	}
	if !cred.Admin && (c.keyAdmin == nil || !c.keyAdmin(c.identity(r, cred), b.Key)) {
		c.log.Warn("console: force-release refused: not an admin credential", "credential", cred.Who, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, wire.CodeForbidden,
			"force-release needs an admin credential (an admin token or a client certificate from the cluster CA) or the policy's admin permission on the key; "+cred.Kind+" is not one")
		return
	}
	if !c.n.IsLeader() {
		// The leader frees the key; the admin credential travels with
		// the request (a certificate does not: the node presents its own,
		// from the same CA).
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(raw)), int64(len(raw))
		if c.forward(w, r) {
			return
		}
		writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "no leader known: try again")
		return
	}
	before, _, _ := c.n.LockDetail(b.Key, 0)
	ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
	defer cancel()
	err = c.n.ForceRelease(raftlock.WithAuditCaller(ctx, raftlock.AuditCaller{Identity: c.identity(r, cred), Remote: browserAddr(r)}), b.Key)
	holders := make([]string, 0, len(before.Holders))
	for _, h := range before.Holders {
		holders = append(holders, fmt.Sprintf("%s/%d", h.Owner, h.Token))
	}
	if err != nil {
		c.log.Warn("console: force-release failed", "key", b.Key, "credential", cred.Who, "remote", r.RemoteAddr, "err", err)
		code := wire.CodeOf(err)
		writeError(w, wire.Status(code), code, err.Error())
		return
	}
	// The audit line: who freed what. forwardedBy and forwardedFor (the
	// browser's address as the member saw it) only from a member's
	// forward: ServeHTTP dropped the header of anyone else's, whose
	// X-Forwarded-For would be the client's own say.
	attrs := []any{"key", b.Key, "holders", holders, "credential", cred.Who, "remote", r.RemoteAddr}
	if by := r.Header.Get(forwardedHeader); by != "" {
		attrs = append(attrs, "forwardedBy", by, "forwardedFor", r.Header.Get("X-Forwarded-For"))
	}
	c.log.Warn("console: force-release", attrs...)
	writeJSON(w, http.StatusOK, forceReply{Key: b.Key, Released: len(before.Holders)})
}

// decodeObject decodes data, which must be one JSON object and nothing
// after it, into v, refusing unknown fields. (A json.Decoder alone stops
// after the first value.)
func decodeObject(data []byte, v any) error {
	if t := bytes.TrimLeft(data, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return errors.New("not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if len(bytes.TrimLeft(data[dec.InputOffset():], " \t\r\n")) > 0 {
		return errors.New("data after the JSON object")
	}
	return nil
}

// stripBrowserHeaders removes from a request this node passes on the
// headers by which a browser says which page sent it: this node judged
// them, and the next one would take this node's page for another origin.
func stripBrowserHeaders(h http.Header) {
	h.Del("Origin")
	h.Del("Referer")
	for k := range h {
		if strings.HasPrefix(k, "Sec-Fetch-") {
			delete(h, k)
		}
	}
}

// relay carries the page's WebSocket to the leader's lock protocol
// (/v1/ws): the page connects to its own node only (csp), and a watch
// needs the leader, which a follower names in a not_leader redirect; the
// page dials such a redirect here (console/web/app.ts). It admits the
// node's own page (or a program) with a credential that may read the
// lock table — Credential's, the lock API's own — and, like the reads,
// passes the connection on with this node's transport (over TLS its
// certificate), the browser's token in its subprotocol.
func (c *Console) relay(w http.ResponseWriter, r *http.Request) {
	if ref := crossorigin.CheckOrigin(r, nil); ref != nil {
		c.log.Warn("console: cross-site WebSocket relay refused", "origin", r.Header.Get("Origin"), "remote", r.RemoteAddr)
		writeError(w, ref.Status, ref.Code, ref.Message)
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeError(w, http.StatusBadRequest, wire.CodeBadJSON, "the relay carries WebSocket upgrades only")
		return
	}
	tok, has := gateway.BearerToken(r)
	if _, ok := c.n.CredentialWith(r, tok, has); !ok {
		w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
		writeError(w, http.StatusUnauthorized, wire.CodeUnauthorized,
			"a credential is required: a bearer token (in the lockgate.bearer. subprotocol), an admin token, or a client certificate from the cluster CA")
		return
	}
	addr := c.n.APIAddr()
	if !c.n.IsLeader() {
		if _, addr = c.n.Leader(); addr == "" {
			writeError(w, http.StatusServiceUnavailable, wire.CodeUnavailable, "no leader known: try again")
			return
		}
	}
	p := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: c.n.APIScheme(), Host: addr})
			pr.Out.URL.Path, pr.Out.URL.RawPath, pr.Out.URL.RawQuery = "/v1/ws", "", ""
			pr.SetXForwarded()
			stripBrowserHeaders(pr.Out.Header)
		},
		Transport: c.n.APITransport(),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			writeError(w, http.StatusBadGateway, wire.CodeUnavailable, "the leader at "+addr+" did not answer: "+err.Error())
		},
	}
	p.ServeHTTP(w, r)
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
func (c *Console) identity(r *http.Request, cred raftlock.Credential) string {
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
