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
	"github.com/lockgate/lockgate/lock/kit"
)

// REST: /locks/{key} and /tickets/{ticket}. Leases are not
// stored: renew and release name them by (key, lock_token, fencing_token).

type acquireBody struct {
	ClientID    string  `json:"client_id"`
	TTLMS       int64   `json:"ttl_ms"`
	Value       *string `json:"value"`
	WaitMS      int64   `json:"wait_ms"`
	LockToken   string  `json:"lock_token"`
	Mode        string  `json:"mode"`
	Permits     int     `json:"permits"`
	LockDelayMS int64   `json:"lock_delay_ms"`
	// SessionID puts the lease(s) in that session.
	SessionID string `json:"session_id"`
}

// acquireAllBody is POST /locks: an acquireBody with the keys.
type acquireAllBody struct {
	Keys []string `json:"keys"`
	acquireBody
}

// request is the acquire b names: of key, or of keys (multi).
func (b *acquireBody) request(key string, keys []string, multi bool) acquireRequest {
	return acquireRequest{Key: key, Keys: keys, Multi: multi,
		TTLMS: b.TTLMS, Value: b.Value, ClientID: b.ClientID, LockToken: b.LockToken,
		Mode: b.Mode, Permits: b.Permits, LockDelayMS: b.LockDelayMS, SessionID: b.SessionID}
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
	Mode         string            `json:"mode,omitempty"`
	Permits      int               `json:"permits,omitempty"`
	SessionID    string            `json:"session_id,omitempty"`
}

func grantOf(l *lock.Lease) grantBody {
	return grantBody{Key: l.Key, Owner: l.Owner, LockToken: l.Handle,
		FencingToken: wire.FencingToken{Key: l.Key, Value: uint64(l.Token)}, TTLMS: durationMS(l.TTL()),
		Mode: modeName(l.Mode), Permits: l.Permits, SessionID: sessionIDOf(l)}
}

func (g *Gateway) serveLock(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	switch r.Method {
	case http.MethodPost:
		w, r, done := g.restSpan(w, r, "acquire", key)
		defer done()
		g.restAcquire(w, r, key)
	case http.MethodPut:
		g.restRenew(w, r, key)
	case http.MethodDelete:
		w, r, done := g.restSpan(w, r, "release", key)
		defer done()
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
	if !g.checkWait(w, r, b.WaitMS) {
		return
	}
	// The backend validates too; checking here keeps bad input from
	// taking a ticket.
	opts, aerr := g.acquireOptions(b.request(key, nil, false), restOwner)
	if aerr != nil {
		g.writeError(w, r, aerr)
		return
	}
	if err := g.sessionAcquire(r.Context(), b.SessionID, key, &opts); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	start := time.Now()
	if b.WaitMS == 0 {
		lease, err := g.tl.TryAcquire(r.Context(), key, opts)
		g.answerGrant(w, r, start, lease, err)
		return
	}
	g.restWait(w, r, start, b.WaitMS, false, func(ctx context.Context) ([]*lock.Lease, error) {
		lease, err := g.tl.Acquire(ctx, key, opts)
		if err != nil {
			return nil, err
		}
		return []*lock.Lease{lease}, nil
	})
}

// restAcquireAll is POST /locks: every key of keys, all at once, or none
// (FeatureMultiKey). It answers {"leases": [grant…]} in the order of keys,
// with the tickets of restAcquire for a wait beyond the synchronous window.
func (g *Gateway) restAcquireAll(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		g.writeError(w, r, newError(wire.CodeMethodNotAllowed, r.Method+" is not allowed on /locks: use POST"))
		return
	}
	var b acquireAllBody
	if !g.readBody(w, r, &b, false) {
		return
	}
	if !g.checkWait(w, r, b.WaitMS) {
		return
	}
	opts, aerr := g.acquireOptions(b.request("", b.Keys, true), restOwner)
	if aerr != nil {
		g.writeError(w, r, aerr)
		return
	}
	if err := g.sessionAcquire(r.Context(), b.SessionID, b.Keys[0], &opts); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	ml := g.tl // featuresOf checked the backend's interface
	start := time.Now()
	if b.WaitMS == 0 {
		leases, err := ml.TryAcquireAll(r.Context(), b.Keys, opts)
		g.answerGrants(w, r, start, true, leases, err)
		return
	}
	g.restWait(w, r, start, b.WaitMS, true, func(ctx context.Context) ([]*lock.Lease, error) {
		return ml.AcquireAll(ctx, b.Keys, opts)
	})
}

// checkWait answers invalid_wait and reports false when wait_ms is out of
// range. It is bounded before it becomes a duration: a large wait_ms
// once overflowed the multiplication into a negative wait.
func (g *Gateway) checkWait(w http.ResponseWriter, r *http.Request, waitMS int64) bool {
	if maxMS := durationMS(g.opts.MaxWait); waitMS < 0 || waitMS > maxMS {
		g.writeError(w, r, newError(wire.CodeInvalidWait,
			fmt.Sprintf("wait_ms is %d; it must be 0 (do not wait) to %d", waitMS, maxMS)))
		return false
	}
	return true
}

// restWait runs a waiting REST acquire: answered at once if the wait ends
// within the synchronous window (200 granted, 408 when a wait_ms within
// the window ran out), else 202 with a ticket.
func (g *Gateway) restWait(w http.ResponseWriter, r *http.Request, start time.Time, waitMS int64, multi bool, acquire func(context.Context) ([]*lock.Lease, error)) {
	wait := time.Duration(waitMS) * time.Millisecond
	t, ok := g.tickets.start(g, context.WithoutCancel(r.Context()), g.clientOf(r), multi, acquire, wait)
	if !ok {
		g.writeError(w, r, newError(wire.CodeTooManyTickets,
			fmt.Sprintf("this client already has %d tickets, the maximum: collect or cancel some first", g.opts.MaxTicketsPerClient)))
		return
	}
	select {
	case <-t.done:
		g.tickets.collect(t.id)
		g.answerGrants(w, r, start, multi, t.leases, t.err)
	case <-time.After(g.opts.SyncWindow):
		// A wait_ms within the window has ended (granted or run out) long
		// before: it is answered above, 200 or 408, and only a backend
		// slow to give up gets here. Timed at min(wait_ms, window) the
		// answer raced the wait's own deadline: 202 or 408 by chance.
		writeJSON(w, http.StatusAccepted, map[string]any{"ticket": t.id, "poll": "/tickets/" + t.id, "wait_ms": durationMS(wait)})
	case <-r.Context().Done():
		// The client left before it learnt the ticket: nobody can collect
		// it, so it ends here rather than count against the client.
		t.cancel()
		<-t.done
		if g.tickets.collect(t.id) {
			t.releaseAll(g)
		}
	}
}

// answerGrants answers a ticket's or an acquireAll's outcome: a grant
// (multi false: leases has one lease) or {"leases": […]}.
func (g *Gateway) answerGrants(w http.ResponseWriter, r *http.Request, start time.Time, multi bool, leases []*lock.Lease, err error) {
	if err == nil && len(leases) == 0 {
		err = errShortGrant
	}
	if !multi || err != nil {
		var lease *lock.Lease
		if err == nil {
			lease = leases[0]
		}
		g.answerGrant(w, r, start, lease, err)
		return
	}
	g.metrics.acquire.WithLabelValues("rest").Observe(time.Since(start).Seconds())
	g.metrics.grants.Add(float64(len(leases)))
	body := make([]grantBody, len(leases))
	for i, l := range leases {
		body[i] = grantOf(l)
	}
	writeJSON(w, http.StatusOK, map[string]any{"leases": body})
}

func (g *Gateway) answerGrant(w http.ResponseWriter, r *http.Request, start time.Time, lease *lock.Lease, err error) {
	if err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	g.metrics.acquire.WithLabelValues("rest").Observe(time.Since(start).Seconds())
	g.metrics.grants.Inc()
	noteREST(r, lease, nil)
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
	if aerr := leaseRef(key, b.LockToken, b.FencingToken, restSpelling); aerr != nil {
		g.writeError(w, r, aerr)
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
	if err := g.tl.Renew(r.Context(), lease, ttl); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	g.metrics.leaseRenews.Inc()
	writeJSON(w, http.StatusOK, map[string]any{"key": key, "fencing_token": wire.FencingToken{Key: key, Value: uint64(lease.Token)}, "ttl_ms": durationMS(ttl)})
}

func (g *Gateway) restRelease(w http.ResponseWriter, r *http.Request, key string) {
	lease, _, ok := g.leaseFromBody(w, r, key, true)
	if !ok {
		return
	}
	if err := g.tl.Release(r.Context(), lease); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (g *Gateway) restInspect(w http.ResponseWriter, r *http.Request, key string) {
	if err := kit.ValidateKey(key); err != nil {
		g.writeError(w, r, toAPIError(err))
		return
	}
	info, err := g.tl.Inspect(r.Context(), key)
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
	if m := modeName(info.Mode); m != "" {
		body["mode"] = m
	}
	if info.Permits != 0 {
		body["permits"] = info.Permits
	}
	if len(info.Holders) > 0 {
		hs := make([]map[string]any, len(info.Holders))
		for i, h := range info.Holders {
			m := map[string]any{"owner": h.Owner, "fencing_token": wire.FencingToken{Key: info.Key, Value: uint64(h.Token)}}
			if h.Value != nil {
				m["value"] = string(h.Value)
			}
			if !h.Expires.IsZero() {
				m["expires_in_ms"] = max(durationMS(time.Until(h.Expires)), 0)
			}
			hs[i] = m
		}
		body["holders"] = hs
	}
	writeJSON(w, http.StatusOK, body)
}

func (g *Gateway) serveTicket(w http.ResponseWriter, r *http.Request) {
	// The method first: whether it is allowed does not depend on the
	// ticket, so an unknown ticket answers 405 to PATCH as a known one does.
	if r.Method != http.MethodGet && r.Method != http.MethodDelete {
		w.Header().Set("Allow", "GET, DELETE")
		g.writeError(w, r, newError(wire.CodeMethodNotAllowed, r.Method+" is not allowed on /tickets/{ticket}: use GET or DELETE"))
		return
	}
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
		g.answerGrants(w, r, t.start, t.multi, t.leases, t.err)
	case http.MethodDelete:
		t.cancel()
		<-t.done // Acquire returns promptly once cancelled
		if g.tickets.collect(id) {
			// A grant that won the race with the cancel: give it back.
			t.releaseAll(g)
		}
		w.WriteHeader(http.StatusNoContent)
	}
}

// readBody decodes a JSON body into v. An empty body is allowed when
// optional. It answers 400/413/415 itself and reports false.
func (g *Gateway) readBody(w http.ResponseWriter, r *http.Request, v any, required bool) bool {
	if ct := r.Header.Get("Content-Type"); ct != "" {
		// ServeHTTP refused other types already (refuseCrossSite); this
		// keeps readBody right on its own.
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || mt != "application/json" {
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
	noteRESTCode(r, e.Code)
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
	if e.RetryIn > 0 {
		body["retry_in_ms"] = e.RetryIn
		if e.Code == wire.CodeRateLimited {
			w.Header().Set("Retry-After", strconv.FormatInt((e.RetryIn+999)/1000, 10))
			// The answer waits: a client sending faster than its rate
			// holds its connections instead of the server's CPU.
			throttle(r.Context(), time.Duration(e.RetryIn)*time.Millisecond)
		}
	}
	if e.Feature != "" {
		body["feature"] = e.Feature
	}
	if e.Quota != "" {
		body["quota"] = e.Quota
	}
	writeJSON(w, status, map[string]any{"error": body})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
