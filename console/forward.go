package console

import (
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"

	"github.com/lockgate/lockgate/gateway"
	"github.com/lockgate/lockgate/internal/crossorigin"
	"github.com/lockgate/lockgate/internal/wire"
)

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
