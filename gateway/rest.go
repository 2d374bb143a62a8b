package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// REST: /locks/{key} and /tickets/{ticket}. Leases are not
// stored: renew and release name them by (key, lock_token, fencing_token).

type acquireBody struct {
	ClientID  string  `json:"client_id"`
	TTLMS     int64   `json:"ttl_ms"`
	Value     *string `json:"value"`
	WaitMS    int64   `json:"wait_ms"`
	LockToken string  `json:"lock_token"`
}

// leaseBody names a lease. fencing_token is {"key", "value"}, the shape of
// every message (protocol v1); a bare number, the shape REST took before
// v1, is still read in this release.
type leaseBody struct {
	LockToken    string             `json:"lock_token"`
	FencingToken *wire.FencingToken `json:"fencing_token"`
	TTLMS        int64              `json:"ttl_ms"`
}

type grantBody struct {
	Key          string            `json:"key"`
	Owner        string            `json:"owner"`
	LockToken    string            `json:"lock_token"`
	FencingToken wire.FencingToken `json:"fencing_token"`
	TTLMS        int64             `json:"ttl_ms"`
}

func grantOf(l *lock.Lease) grantBody {
	return grantBody{Key: l.Key, Owner: l.Owner, LockToken: l.Handle,
		FencingToken: wire.FencingToken{Key: l.Key, Value: uint64(l.Token)}, TTLMS: durationMS(l.TTL())}
}

func (g *Gateway) serveLock(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	switch r.Method {
	case http.MethodPost:
		g.restAcquire(w, r, key)
	case http.MethodPut:
		g.restRenew(w, r, key)
	case http.MethodDelete:
		g.restRelease(w, r, key)
	case http.MethodGet, http.MethodHead:
		g.restInspect(w, r, key)
	default:
		w.Header().Set("Allow", "GET, POST, PUT, DELETE")
		g.writeError(w, r, newError(wire.CodeMethodNotAllowed, r.Method+" is not allowed on /locks/{key}: use POST, PUT, DELETE or GET"))
	}
}

func (g *Gateway) restAcquire(w http.ResponseWriter, r *http.Request, key string) {
	var b acquireBody
	if !g.readBody(w, r, &b, false) {
		return
	}
	// Bounded before it becomes a duration: a large wait_ms overflowed
	// the multiplication into a negative wait (issue 15).
	if maxMS := durationMS(g.opts.MaxWait); b.WaitMS < 0 || b.WaitMS > maxMS {
		g.writeError(w, r, newError(wire.CodeInvalidWait,
			fmt.Sprintf("wait_ms is %d; it must be 0 (do not wait) to %d", b.WaitMS, maxMS)))
		return
	}
	opts := lock.AcquireOptions{TTL: ttlOption(b.TTLMS), Owner: b.ClientID, Handle: b.LockToken}
	if opts.Owner == "" {
		opts.Owner = "rest-" + lock.NewHandle()[:12]
	}
	if b.Value != nil {
		opts.Value = []byte(*b.Value)
	}
	// The backend validates too; checking here keeps bad input from
	// taking a ticket.
	if _, err := opts.Normalize(key, opts.Owner); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	start := time.Now()
	if b.WaitMS == 0 {
		lease, err := g.l.TryAcquire(r.Context(), key, opts)
		g.answerGrant(w, r, start, lease, err)
		return
	}
	wait := time.Duration(b.WaitMS) * time.Millisecond
	t, ok := g.tickets.start(g, g.clientOf(r), key, opts, wait)
	if !ok {
		g.writeError(w, r, newError(wire.CodeTooManyTickets,
			fmt.Sprintf("this client already has %d tickets, the maximum: collect or cancel some first", g.opts.MaxTicketsPerClient)))
		return
	}
	select {
	case <-t.done:
		g.tickets.collect(t.id)
		g.answerGrant(w, r, start, t.lease, t.err)
	case <-time.After(min(wait, g.opts.SyncWindow)):
		writeJSON(w, http.StatusAccepted, map[string]any{"ticket": t.id, "poll": "/tickets/" + t.id, "wait_ms": durationMS(wait)})
	case <-r.Context().Done():
		// The client left before it learnt the ticket: nobody can collect
		// it, so it ends here rather than count against the client.
		t.cancel()
		<-t.done
		if g.tickets.collect(t.id) && t.lease != nil {
			rctx, rcancel := context.WithTimeout(context.Background(), opTimeout)
			defer rcancel()
			g.l.Release(rctx, t.lease)
		}
	}
}

func (g *Gateway) answerGrant(w http.ResponseWriter, r *http.Request, start time.Time, lease *lock.Lease, err error) {
	if err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	g.metrics.acquire.WithLabelValues("rest").Observe(time.Since(start).Seconds())
	g.metrics.grants.Inc()
	writeJSON(w, http.StatusOK, grantOf(lease))
}

// leaseFromBody reads the lease a PUT or DELETE names (body, or query
// parameters for DELETE).
func (g *Gateway) leaseFromBody(w http.ResponseWriter, r *http.Request, key string, allowQuery bool) (*lock.Lease, time.Duration, bool) {
	var b leaseBody
	if allowQuery && r.URL.Query().Has("lock_token") {
		b.LockToken = r.URL.Query().Get("lock_token")
		if s := r.URL.Query().Get("fencing_token"); s != "" {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				g.writeError(w, r, newError(wire.CodeBadJSON, "fencing_token must be an unsigned integer"))
				return nil, 0, false
			}
			b.FencingToken = &wire.FencingToken{Key: key, Value: v}
		}
	} else if !g.readBody(w, r, &b, true) {
		return nil, 0, false
	}
	switch {
	case b.LockToken == "":
		g.writeError(w, r, newError(wire.CodeMissingField, "lock_token is required"))
		return nil, 0, false
	case b.FencingToken == nil:
		g.writeError(w, r, newError(wire.CodeMissingField, "fencing_token is required"))
		return nil, 0, false
	}
	if aerr := validateLeaseRef(key, b.LockToken); aerr != nil {
		g.writeError(w, r, aerr)
		return nil, 0, false
	}
	if k := b.FencingToken.Key; k != "" && k != key {
		g.writeError(w, r, newError(wire.CodeBadJSON, fmt.Sprintf("fencing_token.key %q is not the lock's key %q", k, key)))
		return nil, 0, false
	}
	ttl := ttlOption(b.TTLMS)
	return rebuild(key, b.LockToken, b.FencingToken.Value, ttl), ttl, true
}

func (g *Gateway) restRenew(w http.ResponseWriter, r *http.Request, key string) {
	lease, ttl, ok := g.leaseFromBody(w, r, key, false)
	if !ok {
		return
	}
	if err := g.l.Renew(r.Context(), lease, ttl); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "fencing_token": wire.FencingToken{Key: key, Value: uint64(lease.Token)}, "ttl_ms": durationMS(ttl)})
}

func (g *Gateway) restRelease(w http.ResponseWriter, r *http.Request, key string) {
	lease, _, ok := g.leaseFromBody(w, r, key, true)
	if !ok {
		return
	}
	if err := g.l.Release(r.Context(), lease); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) restInspect(w http.ResponseWriter, r *http.Request, key string) {
	if err := lock.ValidateKey(key); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	info, err := g.l.Inspect(r.Context(), key)
	if err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	body := map[string]any{"key": info.Key, "owner": info.Owner, "fencing_token": wire.FencingToken{Key: info.Key, Value: uint64(info.Token)}, "waiters": info.Waiters}
	if info.Value != nil {
		body["value"] = string(info.Value)
	}
	if !info.Expires.IsZero() {
		body["expires_in_ms"] = max(durationMS(time.Until(info.Expires)), 0)
	}
	writeJSON(w, http.StatusOK, body)
}

func (g *Gateway) serveTicket(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("ticket")
	t := g.tickets.get(id)
	if t == nil {
		g.writeError(w, r, newError(wire.CodeNotFound, fmt.Sprintf("no ticket %q (unknown, or its result was already collected)", id)))
		return
	}
	switch r.Method {
	case http.MethodGet:
		select {
		case <-t.done:
		default:
			writeJSON(w, http.StatusAccepted, map[string]any{"ticket": id, "status": "waiting"})
			return
		}
		g.tickets.collect(id)
		if errors.Is(t.err, context.DeadlineExceeded) {
			g.writeError(w, r, newError(wire.CodeTimeout, "wait_ms ran out before the lock was granted"))
			return
		}
		g.answerGrant(w, r, t.start, t.lease, t.err)
	case http.MethodDelete:
		t.cancel()
		<-t.done // Acquire returns promptly once cancelled
		if g.tickets.collect(id) && t.lease != nil {
			// The grant won the race with the cancel: give it back.
			if err := g.l.Release(r.Context(), t.lease); err != nil {
				g.log.Info("releasing a cancelled ticket's grant failed", "key", t.lease.Key, "err", err)
			}
		}
		w.WriteHeader(http.StatusNoContent)
	default:
		w.Header().Set("Allow", "GET, DELETE")
		g.writeError(w, r, newError(wire.CodeMethodNotAllowed, r.Method+" is not allowed on /tickets/{ticket}: use GET or DELETE"))
	}
}

// readBody decodes a JSON body into v. An empty body is allowed when
// optional. It answers 400/413/415 itself and reports false.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		// curl -d sends form encoding by default; the body is still JSON.
		if err != nil || (mt != "application/json" && mt != "application/x-www-form-urlencoded") {
			g.writeError(w, r, newError(wire.CodeUnsupportedMediaType, "the body must be JSON (Content-Type: application/json), not "+ct))
			return false
		}
	}
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.opts.MaxMessageBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			g.writeError(w, r, newError(wire.CodeTooLarge, fmt.Sprintf("the body exceeds %d bytes", mbe.Limit)))
		} else {
			g.writeError(w, r, newError(wire.CodeBadJSON, "reading the body: "+err.Error()))
		}
		return false
	}
	if len(data) == 0 {
		if required {
			g.writeError(w, r, newError(wire.CodeMissingField, "a JSON body with lock_token and fencing_token is required"))
			return false
		}
		return true
	}
	if aerr := checkObject(data); aerr != nil {
		g.writeError(w, r, aerr)
		return false
	}
	if err := decodeStrict(data, v); err != nil {
		g.writeError(w, r, newError(wire.CodeBadJSON, "malformed JSON body: "+err.Error()))
		return false
	}
	return true
}

// clientOf names the client a REST request counts against for
// Options.MaxTicketsPerClient: its bearer token (by digest, so that the
// table holds no secret) when the gateway checks tokens, else the IP
// address it connects from. An unchecked Authorization header does not
// count: a client could vary it to escape the limit.
func (g *Gateway) clientOf(r *http.Request) string {
	if g.opts.Tokens != nil {
		if tok, ok := bearer(r); ok {
			d := sha256.Sum256([]byte(tok))
			return "token:" + hex.EncodeToString(d[:8])
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		host = r.RemoteAddr
	}
	return "ip:" + host
}

// writeError answers with a JSON error body; a not-leader error with a known
// leader becomes a 307 redirect to the same path on the leader.
func (g *Gateway) writeError(w http.ResponseWriter, r *http.Request, e *apiError) {
	g.metrics.errors.WithLabelValues(e.Code).Inc()
	status := e.status
	if e.Code == wire.CodeNotLeader && e.Leader != nil && e.Leader.Addr != "" {
		scheme := "http://"
		if r.TLS != nil { // a TLS gateway's peers serve TLS too
			scheme = "https://"
		}
		w.Header().Set("Location", scheme+e.Leader.Addr+r.URL.RequestURI())
		status = http.StatusTemporaryRedirect
	}
	body := map[string]any{"code": e.Code, "message": e.Message}
	if e.Leader != nil {
		body["leader"] = e.Leader
	}
	if h := e.Holder; h != nil { // REST spells fields in snake_case
		body["holder"] = map[string]any{"owner": h.Owner, "fencing_token": h.FencingToken, "expires_in_ms": h.ExpiresIn}
	}
	writeJSON(w, status, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
