package fencedstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
)

// MaxBodyBytes bounds a POST /write body; larger bodies get 413.
const MaxBodyBytes = 2 << 20

// Error codes of the HTTP API.
const (
	CodeStaleToken       = "stale_token"        // 409
	CodeBadJSON          = "bad_json"           // 400
	CodeInvalid          = "invalid"            // 400
	CodeTooLarge         = "too_large"          // 413
	CodeMethodNotAllowed = "method_not_allowed" // 405
	CodeNotFound         = "not_found"          // 404
	CodeUnavailable      = "unavailable"        // 503
	CodeInvalidKey       = "invalid_key"        // 400
	CodeInvalidClientID  = "invalid_client_id"  // 400
	CodeUnauthorized     = "unauthorized"       // 401
)

// writeResponse is the body of POST /write's answers (a
// WriteResponse, with an error object on failure).
type writeResponse struct {
	Success bool       `json:"success"`
	Error   *errorBody `json:"error,omitempty"`
}

type errorBody struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Key     string  `json:"key,omitempty"`
	Token   *uint64 `json:"token,omitempty"`
	Highest *uint64 `json:"highest,omitempty"`
}

// HandlerOptions configure NewHandler. The zero value serves everyone: fit
// for loopback and tests only (the CLI refuses it on other addresses).
type HandlerOptions struct {
	// Logger receives write failures; nil discards.
	Logger *slog.Logger
	// Authorize, when set, decides whether a request may use the store:
	// every path but /healthz needs it to answer true. The CLI passes the
	// gateway's bearer-token check (gateway.Tokens.Authorized); the package
	// asks only for this function so that it depends on no server.
	Authorize func(*http.Request) bool
}

// NewHandler serves s:
//
//	POST /write        WriteRequest → 200 {"success": true}; 409 stale_token;
//	                   400 bad_json / invalid_key / invalid_client_id /
//	                   invalid; 413 too_large
//	GET  /read/{key}   200 Record, 404 not_found
//	GET  /stats        200 Stats
//	GET  /healthz      200, or 503 once the store failed a write
//
// Other methods get 405. Errors are {"success": false, "error": {"code",
// "message", ...}}. With opts.Authorize, a refused request (anything but
// /healthz) gets 401 unauthorized, the same whatever was wrong, and its
// connection is closed.
func NewHandler(s *Store, opts HandlerOptions) http.Handler {
	logger := opts.Logger
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	h := &handler{s: s, log: logger}
	mux := http.NewServeMux()
	mux.HandleFunc("/write", h.write)
	mux.HandleFunc("/read/{key...}", h.read)
	mux.HandleFunc("/stats", h.stats)
	mux.HandleFunc("/healthz", h.healthz)
	if opts.Authorize == nil {
		return mux
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" && !opts.Authorize(r) {
			logger.Debug("fenced store: unauthorized request refused", "remote", r.RemoteAddr, "method", r.Method, "path", r.URL.Path)
			w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
			// A client without a token has no business keeping a
			// connection (and a file descriptor) of the store.
			w.Header().Set("Connection", "close")
			fail(w, http.StatusUnauthorized, &errorBody{Code: CodeUnauthorized, Message: ErrUnauthorized.Error()})
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type handler struct {
	s   *Store
	log *slog.Logger
}

func (h *handler) write(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodPost) {
		return
	}
	if r.ContentLength > MaxBodyBytes {
		fail(w, http.StatusRequestEntityTooLarge, &errorBody{Code: CodeTooLarge,
			Message: fmt.Sprintf("body is %d bytes, limit %d", r.ContentLength, MaxBodyBytes)})
		return
	}
	req, e := decodeWrite(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if e != nil {
		status := http.StatusBadRequest
		if e.Code == CodeTooLarge {
			status = http.StatusRequestEntityTooLarge
		}
		fail(w, status, e)
		return
	}
	_, err := h.s.Write(r.Context(), req)
	var stale *StaleTokenError
	switch {
	case err == nil:
		reply(w, http.StatusOK, writeResponse{Success: true})
	case errors.As(err, &stale):
		fail(w, http.StatusConflict, &errorBody{Code: CodeStaleToken, Message: stale.Error(),
			Key: stale.Key, Token: &stale.Token, Highest: &stale.Highest})
	case errors.Is(err, ErrInvalidKey):
		fail(w, http.StatusBadRequest, &errorBody{Code: CodeInvalidKey, Message: err.Error()})
	case errors.Is(err, ErrInvalidClientID):
		fail(w, http.StatusBadRequest, &errorBody{Code: CodeInvalidClientID, Message: err.Error()})
	case errors.Is(err, ErrInvalid):
		fail(w, http.StatusBadRequest, &errorBody{Code: CodeInvalid, Message: err.Error()})
	default:
		if r.Context().Err() == nil {
			h.log.Error("fenced store: write failed", "key", req.Token.Key, "err", err)
		}
		fail(w, http.StatusServiceUnavailable, &errorBody{Code: CodeUnavailable, Message: err.Error()})
	}
}

func (h *handler) read(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	key := r.PathValue("key")
	rec, ok := h.s.Read(key)
	if !ok {
		fail(w, http.StatusNotFound, &errorBody{Code: CodeNotFound, Message: fmt.Sprintf("no accepted write for key %q", key)})
		return
	}
	reply(w, http.StatusOK, rec)
}

func (h *handler) stats(w http.ResponseWriter, r *http.Request) {
	if allow(w, r, http.MethodGet, http.MethodHead) {
		reply(w, http.StatusOK, h.s.Stats())
	}
}

func (h *handler) healthz(w http.ResponseWriter, r *http.Request) {
	if !allow(w, r, http.MethodGet, http.MethodHead) {
		return
	}
	if err := h.s.Err(); err != nil {
		fail(w, http.StatusServiceUnavailable, &errorBody{Code: CodeUnavailable, Message: err.Error()})
		return
	}
	reply(w, http.StatusOK, map[string]string{"status": "ok"})
}

// allow answers 405 with an Allow header unless r's method is one of methods.
func allow(w http.ResponseWriter, r *http.Request, methods ...string) bool {
	for _, m := range methods {
		if r.Method == m {
			return true
		}
	}
	w.Header().Set("Allow", strings.Join(methods, ", "))
	fail(w, http.StatusMethodNotAllowed, &errorBody{Code: CodeMethodNotAllowed,
		Message: fmt.Sprintf("method %s not allowed; use %s", r.Method, strings.Join(methods, " or "))})
	return false
}

func fail(w http.ResponseWriter, status int, e *errorBody) {
	reply(w, status, writeResponse{Success: false, Error: e})
}

func reply(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
