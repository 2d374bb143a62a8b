// Package crossorigin is the one check every HTTP server of lockgate (the
// gateway's REST API, a raftlock node's membership and admin endpoints,
// the web console) applies to requests that change state, so that a page
// of another origin cannot make a user's browser change anything
// (docs/security.md, "Cross-site requests").
//
// A browser lets any page send a "simple" cross-origin request without
// asking the server first (no CORS preflight): a form post, or a no-cors
// fetch, with a GET, HEAD or POST method and a body typed text/plain,
// application/x-www-form-urlencoded or multipart/form-data. The page
// cannot read the answer, but the server acts on the request. Two rules
// shut that out, each enough on its own against today's browsers:
//
//   - A state-changing request with a body must say Content-Type:
//     application/json. A page can send that type cross-origin only after
//     a CORS preflight, which no lockgate server answers, so the browser
//     never sends the request.
//   - A request whose Origin is neither the server's own nor an allowed
//     one is refused; so is one without Origin that Sec-Fetch-Site says
//     comes from another site. Browsers send Origin with every
//     cross-origin POST, PUT, PATCH and DELETE, forms and no-cors fetches
//     included. A request without either header is a program's, not a
//     page's, and passes.
//
// The package lives apart from package gateway so that backend/raftlock
// uses it without linking the gateway; gateway.CheckStateChanging is the
// same check.
package crossorigin

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/lockgate/lockgate/internal/wire"
)

// Refusal is why Check refused a request: the protocol's error code
// (wire.CodeUnsupportedMediaType or wire.CodeForbidden), its HTTP status
// and a message for the caller.
type Refusal struct {
	Code    string
	Status  int
	Message string
}

// StateChanging reports whether a request of method may change state:
// anything but GET, HEAD, OPTIONS and TRACE. POST, PUT, PATCH and DELETE
// are the ones lockgate serves; an unknown method counts as changing
// state, so that a handler that forgets to check its method is covered.
func StateChanging(method string) bool {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return false
	}
	return true
}

// Check returns nil when r may go on, else why not. Requests that do not
// change state (StateChanging) always may: their answers are what CORS
// keeps from other origins. A state-changing request is refused
//
//   - with 415 unsupported_media_type when it has a body (or may have one:
//     a chunked body of unknown length) and its Content-Type is not
//     application/json (parameters such as charset allowed), or when it
//     names any other Content-Type even with an empty body (a form always
//     names one). An empty body without Content-Type passes: a bodiless
//     DELETE or POST from a program;
//   - with 403 forbidden when its Origin is neither the server's own (the
//     Origin's host and port are r.Host's) nor one of allowedOrigins
//     (scheme://host[:port], compared without case; "*" allows any
//     origin), or when it has no Origin but its Sec-Fetch-Site is
//     "cross-site" or "same-site" (a browser that withheld Origin says
//     so that the page is another site's) and allowedOrigins does not hold
//     "*". Origin "null" (a sandboxed frame, a file: page) is another
//     origin.
//
// The Origin is checked first: a foreign page is told it is foreign.
func Check(r *http.Request, allowedOrigins []string) *Refusal {
	if !StateChanging(r.Method) {
		return nil
	}
	if ref := CheckOrigin(r, allowedOrigins); ref != nil {
		return ref
	}
	return checkContentType(r)
}

// CheckOrigin is Check's Origin rule alone, for a request of any method:
// nil when r comes from no page (no Origin, no Sec-Fetch-Site naming
// another site), from the server's own origin, or from one of
// allowedOrigins ("*": any); else a 403 forbidden refusal. A WebSocket
// upgrade, a GET that opens a channel for anything, needs it.
func CheckOrigin(r *http.Request, allowed []string) *Refusal {
	anyOrigin := false
	for _, o := range allowed {
		anyOrigin = anyOrigin || o == "*"
	}
	origin := r.Header.Get("Origin")
	if origin == "" {
		switch site := strings.ToLower(r.Header.Get("Sec-Fetch-Site")); site {
		case "cross-site", "same-site":
			if anyOrigin {
				return nil
			}
			return &Refusal{Code: wire.CodeForbidden, Status: http.StatusForbidden,
				Message: "a page of another origin (Sec-Fetch-Site: " + site + ") may not " + r.Method + " here: " +
					"only the server's own pages and its allowed origins may (docs/security.md, \"Cross-site requests\")"}
		}
		return nil // a program, not a page
	}
	if anyOrigin || SameOrigin(origin, r.Host) {
		return nil
	}
	for _, o := range allowed {
		if strings.EqualFold(strings.TrimSuffix(o, "/"), origin) {
			return nil
		}
	}
	return &Refusal{Code: wire.CodeForbidden, Status: http.StatusForbidden,
		Message: "a page of origin " + quote(origin) + " may not " + r.Method + " here: " +
			"only the server's own pages and its allowed origins may (docs/security.md, \"Cross-site requests\")"}
}

func checkContentType(r *http.Request) *Refusal {
	ct := r.Header.Get("Content-Type")
	if ct == "" && r.ContentLength == 0 {
		return nil // no body, and none claimed: a bodiless POST or DELETE
	}
	if mt, _, err := mime.ParseMediaType(ct); err == nil && mt == "application/json" {
		return nil
	}
	what := "no Content-Type"
	if ct != "" {
		what = "Content-Type " + quote(ct)
	}
	return &Refusal{Code: wire.CodeUnsupportedMediaType, Status: http.StatusUnsupportedMediaType,
		Message: "a " + r.Method + " with a body must send it as Content-Type: application/json, not " + what +
			" (docs/security.md, \"Cross-site requests\")"}
}

// SameOrigin reports whether origin (an Origin header: scheme://host[:port])
// names host (a request's Host: host[:port]), comparing host names without
// case and taking a missing port as the scheme's default (80 for http, 443
// for https). Only http and https origins can be.
func SameOrigin(origin, host string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" {
		return false
	}
	var def string
	switch strings.ToLower(u.Scheme) {
	case "http":
		def = "80"
	case "https":
		def = "443"
	default:
		return false
	}
	oh, op := splitHostPort(u.Host, def)
	rh, rp := splitHostPort(host, def)
	return oh != "" && strings.EqualFold(oh, rh) && op == rp
}

// splitHostPort splits host[:port], with def for a missing port.
func splitHostPort(hp, def string) (string, string) {
	if h, p, err := net.SplitHostPort(hp); err == nil {
		if p == "" {
			p = def
		}
		return strings.Trim(h, "[]"), p
	}
	return strings.Trim(hp, "[]"), def
}

// quote bounds and quotes a header value for a message.
func quote(s string) string {
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return strconv.Quote(s)
}

// DecodeObject decodes data, which must be one JSON object and nothing
// after it, into v, refusing unknown fields: the body of a state-changing
// request. (A json.Decoder alone stops after the first value: a body with
// more behind its object passed.)
func DecodeObject(data []byte, v any) error {
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
