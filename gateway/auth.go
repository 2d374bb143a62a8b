package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"sync"

	"github.com/gorilla/websocket"
	"github.com/lockgate/lockgate/internal/wire"
)

// MinTokenLen is the shortest bearer token a tokens file may hold: 16
// characters. Generate tokens with `openssl rand -hex 32`.
const MinTokenLen = 16

// Tokens is a set of bearer tokens accepted by a gateway. Only the SHA-256
// digests are kept; a presented token is hashed and compared with every
// digest in constant time, without early exit, so that the time an answer
// takes says nothing about how much of a token was right. It is safe for
// concurrent use; Reload swaps the set atomically.
type Tokens struct {
	mu      sync.RWMutex
	digests [][sha256.Size]byte
}

// NewTokens returns a set of the given tokens (which must be non-empty,
// at least MinTokenLen characters, without whitespace).
func NewTokens(tokens ...string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.set(tokens, "the token list"); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadTokens reads a tokens file: one token per line; blank lines and lines
// starting with # are ignored; surrounding whitespace is trimmed.
func LoadTokens(path string) (*Tokens, error) {
	t := &Tokens{}
	if err := t.Reload(path); err != nil {
		return nil, err
	}
	return t, nil
}

// Reload replaces the set with the tokens of the file at path. On error the
// set is left as it was.
func (t *Tokens) Reload(path string) error {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("gateway: tokens file: %w", err)
	}
	tokens, err := ParseTokens(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("gateway: tokens file %s: %w", path, err)
	}
	return t.set(tokens, path)
}

// ParseTokens reads tokens in the tokens file format (see LoadTokens). An
// error names the line at fault, never the token on it.
func ParseTokens(r io.Reader) ([]string, error) {
	var tokens []string
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if strings.ContainsAny(s, " \t") {
			return nil, fmt.Errorf("line %d: a token must not contain whitespace (one token per line)", line)
		}
		if len(s) < MinTokenLen {
			return nil, fmt.Errorf("line %d: token is %d characters, the minimum is %d (generate one with `openssl rand -hex 32`)", line, len(s), MinTokenLen)
		}
		tokens = append(tokens, s)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return tokens, nil
}

func (t *Tokens) set(tokens []string, from string) error {
	if len(tokens) == 0 {
		return fmt.Errorf("gateway: no tokens in %s: every request would be refused", from)
	}
	ds := make([][sha256.Size]byte, 0, len(tokens))
	for i, s := range tokens {
		if len(s) < MinTokenLen || strings.ContainsAny(s, " \t\r\n") {
			return fmt.Errorf("gateway: token %d of %s: want at least %d characters and no whitespace", i+1, from, MinTokenLen)
		}
		ds = append(ds, sha256.Sum256([]byte(s)))
	}
	t.mu.Lock()
	t.digests = ds
	t.mu.Unlock()
	return nil
}

// Len is how many tokens the set holds.
func (t *Tokens) Len() int {
	t.mu.RLock()
	defer t.mu.RUnlock()
	return len(t.digests)
}

// Valid reports whether token is in the set, in time independent of which
// token (if any) matched and of how much of it matched.
func (t *Tokens) Valid(token string) bool {
	d := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	ok := 0
	for i := range t.digests {
		ok |= subtle.ConstantTimeCompare(d[:], t.digests[i][:])
	}
	return ok == 1 && token != ""
}

// BearerToken returns the bearer token r presents: its "Authorization:
// Bearer <token>" header, or on a WebSocket upgrade the subprotocol that
// carries one (BearerSubprotocolPrefix).
func BearerToken(r *http.Request) (string, bool) { return bearer(r) }

// bearer returns the token of an "Authorization: Bearer <token>" header.
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	const scheme = "bearer "
	if len(h) <= len(scheme) || !strings.EqualFold(h[:len(scheme)], scheme) {
		return bearerSubprotocol(r)
	}
	return strings.TrimSpace(h[len(scheme):]), true
}

// BearerSubprotocolPrefix starts the WebSocket subprotocol that carries a
// bearer token, for browsers, whose WebSocket cannot set Authorization:
// "lockgate.bearer." + the token in unpadded base64url (subprotocols are
// tokens in the HTTP sense; the encoding keeps any token one). Kubernetes
// passes tokens to browser exec sessions the same way. Offer Subprotocol
// beside it, which the gateway selects.
const BearerSubprotocolPrefix = "lockgate.bearer."

// bearerSubprotocol reads the token of a WebSocket upgrade from its
// offered subprotocols (BearerSubprotocolPrefix).
func bearerSubprotocol(r *http.Request) (string, bool) {
	for _, p := range websocket.Subprotocols(r) {
		if enc, ok := strings.CutPrefix(p, BearerSubprotocolPrefix); ok {
			tok, err := base64.RawURLEncoding.DecodeString(enc)
			if err != nil || len(tok) == 0 {
				return "", false
			}
			return string(tok), true
		}
	}
	return "", false
}

// ErrUnauthorized is the message of a refused request. It is the same
// whether the token was missing, malformed or wrong.
var ErrUnauthorized = errors.New("gateway: a valid bearer token is required (Authorization: Bearer <token>)")

// Authorized reports whether r carries a token of t. A nil t authorizes
// every request.
func (t *Tokens) Authorized(r *http.Request) bool {
	if t == nil {
		return true
	}
	tok, ok := bearer(r)
	// Valid runs even without a header, so that the two cases take alike.
	return t.Valid(tok) && ok
}

// writeUnauthorized answers 401 with one body for every failure, and
// closes the connection after it ("Connection: close"): a client without a
// valid token has nothing more to do on it, and must not keep it (and its
// descriptor) open by idling. Whatever server the gateway is mounted on.
func writeUnauthorized(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	w.Header().Set("WWW-Authenticate", `Bearer realm="lockgate"`)
	writeJSON(w, wire.Status(wire.CodeUnauthorized), map[string]any{"error": map[string]any{
		"code": wire.CodeUnauthorized, "message": ErrUnauthorized.Error(),
	}})
}

// RequireToken wraps h so that every request must carry a token of t (nil:
// h unchanged). The CLI wraps the membership endpoints of a node with it.
func RequireToken(t *Tokens, h http.Handler) http.Handler {
	if t == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !t.Authorized(r) {
			writeUnauthorized(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// openPath reports whether path is served without a token: the health checks
// that load balancers and orchestrators poll.
func openPath(path string) bool { return path == "/healthz" || path == "/readyz" }
