package netguard

import (
	"bufio"
	"net"
	"net/http"
)

// CloseRefused wraps h so that a 401 or 403 answer carries "Connection:
// close": net/http then closes the connection once the answer is written.
// A client without valid credentials gets its answer and nothing more; it
// cannot keep the connection (and its file descriptor) open by idling.
// The wrapped writer still supports Flush and Hijack (WebSocket upgrades).
func CloseRefused(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.ServeHTTP(&refusalCloser{ResponseWriter: w}, r)
	})
}

type refusalCloser struct{ http.ResponseWriter }

func (w *refusalCloser) WriteHeader(code int) {
	if code == http.StatusUnauthorized || code == http.StatusForbidden {
		w.Header().Set("Connection", "close")
	}
	w.ResponseWriter.WriteHeader(code)
}

// Unwrap lets http.ResponseController reach the server's writer.
func (w *refusalCloser) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// Flush is here because handlers (Prometheus's) test for http.Flusher.
func (w *refusalCloser) Flush() { http.NewResponseController(w.ResponseWriter).Flush() }

// Hijack is here because the WebSocket upgrader tests for http.Hijacker.
func (w *refusalCloser) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	return http.NewResponseController(w.ResponseWriter).Hijack()
}
