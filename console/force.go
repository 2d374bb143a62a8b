package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"time"

	"github.com/lockgate/lockgate/internal/audit"
	"github.com/lockgate/lockgate/internal/crossorigin"
	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock/kit"
)

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
	if err := crossorigin.DecodeObject(raw, &b); err != nil {
		writeError(w, http.StatusBadRequest, wire.CodeBadJSON, "body: want {\"key\": \"...\"}: "+err.Error())
		return
	}
	if err := kit.ValidateKey(b.Key); err != nil {
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
	err = c.n.ForceRelease(audit.WithCaller(ctx, audit.Caller{Identity: c.identity(r, cred), Remote: browserAddr(r)}), b.Key)
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
