package wire

import (
	"context"
	"errors"
	"net/http"

	"github.com/lockgate/lockgate/lock"
)

// The protocol's error codes: the stable names of what went wrong, in
// WebSocket error.code and REST error bodies alike. Codes lists each with
// its HTTP status and its lock error; docs/protocol.md, "Error codes", is
// their reference for clients in any language (TestDocumentedCodes keeps
// the two equal).
const (
	CodeBadJSON              = "bad_json"
	CodeUnknownCommand       = "unknown_command"
	CodeMissingField         = "missing_field"
	CodeInvalidKey           = "invalid_key"
	CodeInvalidTTL           = "invalid_ttl"
	CodeInvalidValue         = "invalid_value"
	CodeInvalidOwner         = "invalid_owner"
	CodeInvalidHandle        = "invalid_handle"
	CodeInvalidWait          = "invalid_wait"
	CodeHeld                 = "held"
	CodeNotHeld              = "not_held"
	CodeNotFound             = "not_found"
	CodeCancelled            = "cancelled"
	CodeTimeout              = "timeout"
	CodeTooManyWaiters       = "too_many_waiters"
	CodeTooManyLocks         = "too_many_locks"
	CodeTooManyTickets       = "too_many_tickets"
	CodeNotLeader            = "not_leader"
	CodeUnavailable          = "unavailable"
	CodeClosed               = "closed"
	CodeUnauthorized         = "unauthorized"
	CodeForbidden            = "forbidden"
	CodeMethodNotAllowed     = "method_not_allowed"
	CodeTooLarge             = "too_large"
	CodeUnsupportedMediaType = "unsupported_media_type"
	CodeInternal             = "internal"
	// The primitives beyond the mutex.
	CodeUnsupported      = "unsupported"
	CodeInvalidMode      = "invalid_mode"
	CodeInvalidPermits   = "invalid_permits"
	CodeInvalidLockDelay = "invalid_lock_delay"
	CodeInvalidKeys      = "invalid_keys"
	CodePermitsMismatch  = "permits_mismatch"
	CodeDelayed          = "delayed"
	CodeWatchOverflow    = "watch_overflow"
	CodeTooManyWatches   = "too_many_watches"
	CodeDuplicateID      = "duplicate_id"
	// Sessions.
	CodeSessionExpired  = "session_expired"
	CodeTooManySessions = "too_many_sessions"

	CodeQuotaExceeded = "quota_exceeded"
	CodeRateLimited   = "rate_limited"
)

// StatusClientClosed is nginx's 499, the status of cancelled: the client
// gave up (cancelled a wait). net/http has no name for it.
const StatusClientClosed = 499

// Code is one row of the error-code table.
type Code struct {
	Name   string // the code on the wire
	Status int    // the HTTP status REST answers it with

	// Cause is the lock contract's error a server answers with this code:
	// CodeOf matches it with errors.Is. Nil for the codes of the protocol
	// itself (a malformed frame, a limit, a route), which the server names
	// where it detects them.
	Cause error

	// Sentinel is the lock sentinel that the error a client builds from
	// this code matches with errors.Is; nil for none. It is Cause, except
	// where the row says why not.
	Sentinel error

	// Field is the lock.ValidationError field an invalid_* code names.
	Field string
}

// Codes is the table, in CodeOf's order of precedence: an error matching
// the causes of several rows (errors.Join) gets the first. A structured
// error comes before the sentinels it also matches (a *lock.NotLeaderError
// matches lock.ErrUnavailable too, and must keep its redirect).
var Codes = []Code{
	{Name: CodeNotLeader, Status: http.StatusMisdirectedRequest, Cause: lock.ErrNotLeader, Sentinel: lock.ErrNotLeader},
	// A try-acquire that found the key free but in its lock-delay: a
	// *lock.DelayedError, which matches lock.ErrNotAcquired (so a client
	// that knows only held treats it as held) and has no sentinel of its
	// own to be a Cause; CodeOf finds it by type, before the rows.
	{Name: CodeDelayed, Status: http.StatusConflict, Sentinel: lock.ErrNotAcquired},
	{Name: CodeHeld, Status: http.StatusConflict, Cause: lock.ErrNotAcquired, Sentinel: lock.ErrNotAcquired},
	{Name: CodePermitsMismatch, Status: http.StatusConflict, Cause: lock.ErrPermitsMismatch, Sentinel: lock.ErrPermitsMismatch},
	// The backend lacks the feature a request needs (kit.CheckSupported):
	// 501, the server does not implement what was asked. error.feature
	// names the feature.
	{Name: CodeUnsupported, Status: http.StatusNotImplemented, Cause: lock.ErrUnsupported, Sentinel: lock.ErrUnsupported},
	// The session named is gone (expired or closed): a keep-alive, a
	// close or an acquire in it was refused. Before not_held, which a
	// session's refused keep-alive matches too (kit.SessionRefused); a
	// client's error for it matches lock.ErrNotHeld as well.
	{Name: CodeSessionExpired, Status: http.StatusConflict, Cause: lock.ErrSessionExpired, Sentinel: lock.ErrSessionExpired},
	{Name: CodeNotHeld, Status: http.StatusConflict, Cause: lock.ErrNotHeld, Sentinel: lock.ErrNotHeld},
	{Name: CodeNotFound, Status: http.StatusNotFound, Cause: lock.ErrNotFound, Sentinel: lock.ErrNotFound},
	{Name: CodeInvalidKey, Status: http.StatusBadRequest, Cause: lock.ErrInvalidKey, Sentinel: lock.ErrInvalidKey, Field: "key"},
	{Name: CodeInvalidTTL, Status: http.StatusBadRequest, Cause: lock.ErrInvalidTTL, Sentinel: lock.ErrInvalidTTL, Field: "ttl"},
	{Name: CodeInvalidValue, Status: http.StatusBadRequest, Cause: lock.ErrInvalidValue, Sentinel: lock.ErrInvalidValue, Field: "value"},
	{Name: CodeInvalidOwner, Status: http.StatusBadRequest, Cause: lock.ErrInvalidOwner, Sentinel: lock.ErrInvalidOwner, Field: "owner"},
	{Name: CodeInvalidHandle, Status: http.StatusBadRequest, Cause: lock.ErrInvalidHandle, Sentinel: lock.ErrInvalidHandle, Field: "handle"},
	{Name: CodeInvalidMode, Status: http.StatusBadRequest, Cause: lock.ErrInvalidMode, Sentinel: lock.ErrInvalidMode, Field: "mode"},
	{Name: CodeInvalidPermits, Status: http.StatusBadRequest, Cause: lock.ErrInvalidPermits, Sentinel: lock.ErrInvalidPermits, Field: "permits"},
	{Name: CodeInvalidLockDelay, Status: http.StatusBadRequest, Cause: lock.ErrInvalidLockDelay, Sentinel: lock.ErrInvalidLockDelay, Field: "lock_delay"},
	{Name: CodeInvalidKeys, Status: http.StatusBadRequest, Cause: lock.ErrInvalidKeys, Sentinel: lock.ErrInvalidKeys, Field: "keys"},
	// A nil lease reaches a server only as a request without its lease's
	// fields. A client's own nil lease never leaves it (kit.ValidateLease),
	// so a missing_field answer is a malformed request, not a nil lease:
	// no sentinel.
	{Name: CodeMissingField, Status: http.StatusBadRequest, Cause: lock.ErrNilLease},
	// The client cancelled its own wait; the client reports its own
	// context's error, not one built from this reply.
	{Name: CodeCancelled, Status: StatusClientClosed, Cause: context.Canceled},
	// The server's locker is closed: for the client that is one gateway
	// going away, a retryable outage. Its own lock.ErrClosed means the
	// client itself was closed.
	{Name: CodeClosed, Status: http.StatusServiceUnavailable, Cause: lock.ErrClosed, Sentinel: lock.ErrUnavailable},
	// Also what CodeOf answers for an error no row claims (timeouts,
	// anything a backend did not classify): the outcome is unknown, and
	// retrying is the right move.
	{Name: CodeUnavailable, Status: http.StatusServiceUnavailable, Cause: lock.ErrUnavailable, Sentinel: lock.ErrUnavailable},
	// A limit of the server's, which frees up as other waits end: for the
	// client a retryable outage.
	{Name: CodeTooManyWaiters, Status: http.StatusTooManyRequests, Sentinel: lock.ErrUnavailable},
	// A watch fell behind: the gateway's per-watch buffer filled (its
	// reader is slower than the key's changes), or the backend dropped the
	// watch for the same reason. Only ever an "event" of a watch; 503 if a
	// REST status were needed: watch again.
	{Name: CodeWatchOverflow, Status: http.StatusServiceUnavailable, Cause: lock.ErrWatchOverflow, Sentinel: lock.ErrWatchOverflow},
	// The connection already has the maximum number of watches open: a
	// limit of the client's own making (unwatch some), not an outage.
	{Name: CodeTooManyWatches, Status: http.StatusTooManyRequests},
	// The connection has opened the maximum number of sessions and not
	// closed them (close some): a limit of the client's own making; or the
	// backend holds as many sessions as its own limit.
	{Name: CodeTooManySessions, Status: http.StatusTooManyRequests, Cause: lock.ErrTooManySessions, Sentinel: lock.ErrTooManySessions},
	// A watch whose id names a watch already open on the connection (its
	// events and its unwatch could not be told apart).
	{Name: CodeDuplicateID, Status: http.StatusBadRequest},
	// The caller's identity is at one of its quotas (the error's quota
	// field names which: sessions, leases, waiters, watches). Other
	// identities are not affected; release or close something first.
	{Name: CodeQuotaExceeded, Status: http.StatusTooManyRequests, Cause: lock.ErrQuotaExceeded, Sentinel: lock.ErrQuotaExceeded},
	// The caller's identity sent requests faster than its rate: retry
	// after retryIn ms (REST: Retry-After). Keep-alives and renewals are
	// never refused so.
	{Name: CodeRateLimited, Status: http.StatusTooManyRequests, Cause: lock.ErrRateLimited, Sentinel: lock.ErrRateLimited},
	{Name: CodeBadJSON, Status: http.StatusBadRequest},
	{Name: CodeUnknownCommand, Status: http.StatusBadRequest},
	{Name: CodeInvalidWait, Status: http.StatusBadRequest},
	{Name: CodeTimeout, Status: http.StatusRequestTimeout},
	{Name: CodeTooManyLocks, Status: http.StatusTooManyRequests},
	{Name: CodeTooManyTickets, Status: http.StatusTooManyRequests},
	{Name: CodeUnauthorized, Status: http.StatusUnauthorized},
	// A valid credential that does not authorize the request (a client
	// token asking for an admin action of the web console), or a
	// state-changing console request from another origin.
	{Name: CodeForbidden, Status: http.StatusForbidden, Cause: lock.ErrForbidden, Sentinel: lock.ErrForbidden},
	{Name: CodeMethodNotAllowed, Status: http.StatusMethodNotAllowed},
	{Name: CodeTooLarge, Status: http.StatusRequestEntityTooLarge},
	{Name: CodeUnsupportedMediaType, Status: http.StatusUnsupportedMediaType},
	// A bug: a server answered what the protocol does not allow (an error
	// reply without an error object, a reply of the wrong type).
	{Name: CodeInternal, Status: http.StatusInternalServerError},
}

// byName indexes Codes.
var byName = func() map[string]*Code {
	m := make(map[string]*Code, len(Codes))
	for i := range Codes {
		m[Codes[i].Name] = &Codes[i]
	}
	return m
}()

// Lookup returns the row of code; ok is false for a code the table lacks
// (a newer server's).
func Lookup(code string) (c Code, ok bool) {
	p, ok := byName[code]
	if !ok {
		return Code{Name: code}, false
	}
	return *p, true
}

// Status is the HTTP status of code; 500 for a code the table lacks.
func Status(code string) int {
	if c, ok := Lookup(code); ok {
		return c.Status
	}
	return http.StatusInternalServerError
}

// Sentinel is the lock sentinel a client's error for code matches, or nil.
func Sentinel(code string) error {
	c, _ := Lookup(code)
	return c.Sentinel
}

// CodeOf is the code a server answers err with: the first row whose Cause
// err matches, else unavailable.
func CodeOf(err error) string {
	var de *lock.DelayedError
	if errors.As(err, &de) {
		return CodeDelayed
	}
	for i := range Codes {
		if c := &Codes[i]; c.Cause != nil && errors.Is(err, c.Cause) {
			return c.Name
		}
	}
	return CodeUnavailable
}
