package client

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// reply is one server message as the reader received it.
type reply struct {
	wire.Reply
	arrived time.Time // when the reader got it
}

func (r *reply) token() lock.Token {
	if r.FencingToken == nil {
		return 0
	}
	return lock.Token(r.FencingToken.Value)
}

// code is the error code of an error reply, "" otherwise.
func (r *reply) code() string {
	if r.Type != wire.TypeError {
		return ""
	}
	if r.Error == nil {
		return wire.CodeInternal
	}
	return r.Error.Code
}

// leader returns the leader a not_leader error names.
func leaderOf(e *wire.Error) (id, addr string) {
	if e == nil || e.Leader == nil {
		return "", ""
	}
	return e.Leader.ID, e.Leader.Addr
}

// ServerError is an error reply of the gateway that has no more specific Go
// type (HeldError, NotLeaderError, ValidationError and RateLimitedError
// have their own). It matches, with errors.Is, the lock sentinel
// wire.Codes gives its code: not_held → lock.ErrNotHeld, not_found →
// lock.ErrNotFound, unavailable/closed/too_many_waiters →
// lock.ErrUnavailable, quota_exceeded → lock.ErrQuotaExceeded, forbidden →
// lock.ErrForbidden, too_many_sessions → lock.ErrTooManySessions.
type ServerError struct {
	Code    string // the protocol's error code, e.g. wire.CodeNotHeld
	Message string // the gateway's explanation
	// Quota, on quota_exceeded, names the quota the caller's identity is
	// at: "sessions", "leases", "waiters" or "watches" ("" when the
	// gateway did not say).
	Quota string
	err   error // the sentinel, or nil
}

func (e *ServerError) Error() string {
	msg := e.Message
	if e.Quota != "" {
		msg = fmt.Sprintf("quota %q: %s", e.Quota, msg)
	}
	if e.err != nil {
		return fmt.Sprintf("%v (gateway: %s: %s)", e.err, e.Code, msg)
	}
	return fmt.Sprintf("lockgate gateway: %s: %s", e.Code, msg)
}

// Unwrap returns the lock sentinel of the code, if any.
func (e *ServerError) Unwrap() error { return e.err }

// RateLimitedError is the gateway's rate_limited answer: the caller's
// identity sent requests faster than its rate allows, and the request was
// not carried out (retrying it is safe). It matches lock.ErrRateLimited.
// TryAcquire and TryAcquireAll return it; Acquire and AcquireAll wait it
// out within their context and try again. Keep-alives and renewals are
// never rate-limited.
type RateLimitedError struct {
	Key     string        // the request's key ("" for a request without one)
	Message string        // the gateway's explanation
	RetryIn time.Duration // how long the gateway said to wait (its retryIn); 0 when it did not say
	// Until is when the wait ends on the caller's clock: the answer's
	// arrival plus RetryIn.
	Until time.Time
}

func (e *RateLimitedError) Error() string {
	s := lock.ErrRateLimited.Error()
	if e.Key != "" {
		s += fmt.Sprintf(": key %q", e.Key)
	}
	if e.RetryIn > 0 {
		s += fmt.Sprintf(": retry in %v", e.RetryIn)
	}
	if e.Message != "" {
		s += " (gateway: " + e.Message + ")"
	}
	return s
}

// Unwrap returns lock.ErrRateLimited.
func (e *RateLimitedError) Unwrap() error { return lock.ErrRateLimited }

// replyError turns an error reply about key into the lock contract's error
// for its code (wire.Codes): the structured error where the lock package
// has one, else a ServerError matching the code's sentinel.
func replyError(r *reply, key string) error {
	e := r.Error
	if e == nil {
		e = &wire.Error{Code: wire.CodeInternal, Message: "error reply without an error object"}
	}
	c, _ := wire.Lookup(e.Code) // a code the table lacks: a ServerError without sentinel
	switch {
	case c.Name == wire.CodeHeld:
		he := &lock.HeldError{Key: key}
		if h := e.Holder; h != nil {
			he.Owner = h.Owner
			if h.FencingToken != nil {
				he.Token = lock.Token(h.FencingToken.Value)
			}
			if h.ExpiresIn > 0 {
				he.Expires = r.arrived.Add(time.Duration(h.ExpiresIn) * time.Millisecond)
			}
		}
		return he
	case c.Name == wire.CodeDelayed:
		return &lock.DelayedError{Key: key, Until: r.arrived.Add(time.Duration(e.RetryIn) * time.Millisecond)}
	case c.Name == wire.CodeUnsupported:
		f, _ := lock.ParseFeatures([]string{e.Feature})
		return &lock.UnsupportedError{Backend: "the lockgate gateway's backend", Feature: f, Reason: e.Message}
	case c.Name == wire.CodeRateLimited:
		d := time.Duration(max(e.RetryIn, 0)) * time.Millisecond
		return &RateLimitedError{Key: key, Message: e.Message, RetryIn: d, Until: r.arrived.Add(d)}
	case c.Name == wire.CodeNotLeader:
		id, addr := leaderOf(e)
		return &lock.NotLeaderError{LeaderID: id, LeaderAddr: addr}
	case c.Field != "":
		return &lock.ValidationError{Field: c.Field, Value: strconv.Quote(key), Reason: "rejected by the gateway: " + e.Message, Err: c.Sentinel}
	}
	return &ServerError{Code: e.Code, Message: e.Message, Quota: e.Quota, err: c.Sentinel}
}

// errDropped is the cause recorded when the connection carrying a request
// failed before the request was answered.
var errDropped = errors.New("connection to the gateway lost")

// ms is d in whole milliseconds, rounded down: the server's TTL is then
// never longer than the one the client computes its deadline from.
func ms(d time.Duration) int64 { return int64(d / time.Millisecond) }
