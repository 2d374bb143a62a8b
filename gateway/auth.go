package gateway

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
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

// Tokens is a set of bearer tokens accepted by a gateway, each naming an
// identity (docs/security.md, "Tenants"). Only the SHA-256 digests are
// kept; a presented token is hashed and compared with every digest in
// constant time, without early exit, so that the time an answer takes
// says nothing about how much of a token was right. It is safe for
// concurrent use; Reload swaps the set atomically.
type Tokens struct {
	mu      sync.RWMutex
	digests [][sha256.Size]byte
	names   []string // the identity of each digest
}

// NamedToken is one line of a tokens file: a token and the identity it
// names.
type NamedToken struct {
	// Identity is the name the line gives, or for a bare token
	// UnnamedIdentity(Token).
	Identity string
	Token    string
}

// MaxIdentityLen bounds an identity's name: 64 bytes of letters, digits
// and "-_.:@".
const MaxIdentityLen = 64

// UnnamedIdentity is the identity of a token its file gives no name:
// "token-" and the first 8 bytes of its SHA-256 in hex, which names it in
// logs, metrics and the audit trail without revealing it.
func UnnamedIdentity(token string) string {
	d := sha256.Sum256([]byte(token))
	return "token-" + hex.EncodeToString(d[:8])
}

// CheckIdentity reports whether name may name an identity.
func CheckIdentity(name string) error {
	if name == "" || len(name) > MaxIdentityLen {
		return fmt.Errorf("an identity's name must be 1 to %d bytes", MaxIdentityLen)
	}
	for _, c := range []byte(name) {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("-_.:@", c) >= 0) {
			return fmt.Errorf("identity %q: letters, digits and -_.:@ only", name)
		}
	}
	return nil
}

// NewTokens returns a set of the given tokens (which must be non-empty,
// at least MinTokenLen characters, without whitespace), each its own
// unnamed identity.
func NewTokens(tokens ...string) (*Tokens, error) {
	named := make([]NamedToken, len(tokens))
	for i, tok := range tokens {
		named[i] = NamedToken{Identity: UnnamedIdentity(tok), Token: tok}
	}
	return NewNamedTokens(named)
}

// NewNamedTokens returns a set of the given tokens with their identities.
func NewNamedTokens(tokens []NamedToken) (*Tokens, error) {
	t := &Tokens{}
	if err := t.set(tokens, "the token list"); err != nil {
		return nil, err
	}
	return t, nil
}

// LoadTokens reads a tokens file (ParseNamedTokens has its format).
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
	tokens, err := ParseNamedTokens(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("gateway: tokens file %s: %w", path, err)
	}
	return t.set(tokens, path)
}

// ParseTokens reads the tokens of a tokens file (ParseNamedTokens), without
// their identities: what a client presents is the first.
func ParseTokens(r io.Reader) ([]string, error) {
	named, err := ParseNamedTokens(r)
	if err != nil {
		return nil, err
	}
	tokens := make([]string, len(named))
	for i, n := range named {
		tokens[i] = n.Token
	}
	return tokens, nil
}

// ParseNamedTokens reads a tokens file: one token per line, either alone
// (its identity is UnnamedIdentity of it) or after the name of its
// identity and white space ("billing 3f9a…"); several tokens may name one
// identity (a rotation). Blank lines and lines starting with # are
// ignored; surrounding whitespace is trimmed. An error names the line at
// fault, never the token on it.
func ParseNamedTokens(r io.Reader) ([]NamedToken, error) {
	var tokens []NamedToken
	sc := bufio.NewScanner(r)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		fields := strings.Fields(s)
		var nt NamedToken
		switch len(fields) {
		case 1:
			nt = NamedToken{Identity: UnnamedIdentity(fields[0]), Token: fields[0]}
		case 2:
			if err := CheckIdentity(fields[0]); err != nil {
				return nil, fmt.Errorf("line %d: %w", line, err)
			}
			nt = NamedToken{Identity: fields[0], Token: fields[1]}
		default:
			return nil, fmt.Errorf("line %d: a line is a token, or an identity's name and its token (%d fields)", line, len(fields))
		}
		if len(nt.Token) < MinTokenLen {
			return nil, fmt.Errorf("line %d: token is %d characters, the minimum is %d (generate one with `openssl rand -hex 32`)", line, len(nt.Token), MinTokenLen)
		}
		tokens = append(tokens, nt)
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return tokens, nil
}

func (t *Tokens) set(tokens []NamedToken, from string) error {
	if len(tokens) == 0 {
		return fmt.Errorf("gateway: no tokens in %s: every request would be refused", from)
	}
	ds := make([][sha256.Size]byte, 0, len(tokens))
	names := make([]string, 0, len(tokens))
	for i, nt := range tokens {
		if len(nt.Token) < MinTokenLen || strings.ContainsAny(nt.Token, " \t\r\n") {
			return fmt.Errorf("gateway: token %d of %s: want at least %d characters and no whitespace", i+1, from, MinTokenLen)
		}
		if err := CheckIdentity(nt.Identity); err != nil {
			return fmt.Errorf("gateway: token %d of %s: %w", i+1, from, err)
		}
		ds = append(ds, sha256.Sum256([]byte(nt.Token)))
		names = append(names, nt.Identity)
	}
	t.mu.Lock()
	t.digests, t.names = ds, names
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
	_, ok := t.Identify(token)
	return ok
}

// Identify returns the identity token names, in time independent of which
// token (if any) matched and of how much of it matched; ok is false for a
// token not in the set.
func (t *Tokens) Identify(token string) (identity string, ok bool) {
	d := sha256.Sum256([]byte(token))
	t.mu.RLock()
	defer t.mu.RUnlock()
	match := -1
	for i := range t.digests {
		eq := subtle.ConstantTimeCompare(d[:], t.digests[i][:])
		match = subtle.ConstantTimeSelect(eq, i, match)
	}
	if match < 0 || token == "" {
		return "", false
	}
	return t.names[match], true
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
