package gateway

import (
	"net/http"

	"github.com/lockgate/lockgate/internal/crossorigin"
)

// CheckStateChanging is the cross-site check of every lockgate server
// (docs/security.md, "Cross-site requests"): ok when r may go on, else the
// error code (unsupported_media_type, 415; forbidden, 403) and a message.
// A request that changes state (POST, PUT, PATCH, DELETE, or an unknown
// method) must carry a body, if any, as Content-Type: application/json
// (an empty body may come without Content-Type), and may not come from a
// browser page of another origin: its Origin must be the server's own
// (r.Host) or one of allowedOrigins ("*": any), and without Origin its
// Sec-Fetch-Site must not say another site. GET, HEAD, OPTIONS and TRACE
// always pass. The same check serves raftlock's membership endpoints and
// the web console (package internal/crossorigin, which has the rules in
// full).
func CheckStateChanging(r *http.Request, allowedOrigins []string) (code, msg string, ok bool) {
	if ref := crossorigin.Check(r, allowedOrigins); ref != nil {
		return ref.Code, ref.Message, false
	}
	return "", "", true
}

// refuseCrossSite answers a request that CheckStateChanging refuses, with
// the gateway's allowed origins (Options.AllowedOrigins), and reports
// whether it did. A page of another origin can send a form post or a
// no-cors fetch with a text/plain or form-encoded body without asking the
// server first; the REST API takes only JSON, which such a page cannot
// send, and refuses foreign origins besides. The WebSocket upgrade is a
// GET, judged by its own Origin policy (originAllowed).
func (g *Gateway) refuseCrossSite(w http.ResponseWriter, r *http.Request) bool {
	code, msg, ok := CheckStateChanging(r, g.opts.AllowedOrigins)
	if ok {
		return false
	}
	g.log.Debug("cross-site request refused", "code", code, "method", r.Method, "path", r.URL.Path,
		"origin", r.Header.Get("Origin"), "content_type", r.Header.Get("Content-Type"), "remote", r.RemoteAddr)
	g.writeError(w, r, newError(code, msg))
	return true
}
