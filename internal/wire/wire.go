// Package wire holds the WebSocket protocol's message types, shared by the
// gateway (which serves them) and the Go SDK (which speaks them).
// docs/protocol.md is their reference.
package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
)

// Command types (the commandType field of a request).
const (
	CmdAcquire    = 1 // wait for the key
	CmdRelease    = 2
	CmdRenew      = 3
	CmdInspect    = 4
	CmdTryAcquire = 5 // one attempt
	CmdCancel     = 6 // cancel a waiting acquire by its request id
	// The primitives beyond the mutex (need the backend's feature, else unsupported).
	CmdAcquireAll    = 7  // wait for every key of keys, all at once (multikey)
	CmdTryAcquireAll = 8  // one attempt at every key of keys (multikey)
	CmdWatch         = 9  // stream a key's holder changes as "event" messages with the request's id (watch; prefix: every key under key, watchprefix)
	CmdUnwatch       = 10 // end the watch whose id is target
	// Sessions (need the backend's sessions feature, else
	// unsupported): many leases kept alive by one keep-alive.
	CmdOpenSession  = 11 // open a session: ttl (ms; 0 = the default), clientId
	CmdRenewSession = 12 // keep sessionId alive for its TTL from now
	CmdCloseSession = 13 // end sessionId and release every lease in it
)

// MaxCommand is the highest command type.
const MaxCommand = CmdCloseSession

// Reply types.
const (
	TypeGrant     = "grant"
	TypeReleased  = "released"
	TypeRenewed   = "renewed"
	TypeInfo      = "info"
	TypeCancelled = "cancelled"
	TypeError     = "error"
	// TypeWanted is pushed to a holder when another caller waits for a
	// key it holds (key, fencingToken and lockToken name the lease).
	TypeWanted = "wanted"
	// TypeGrants answers an acquireAll (7) or tryAcquireAll (8): leases
	// holds one grant per key, in the order of the request's keys.
	TypeGrants = "grants"
	// TypeEvent is pushed for a watch (9), with the watch's id: one change
	// of the key's holders (event names which; see the Event* constants).
	TypeEvent = "event"
	// TypeUnwatched answers an unwatch (10); no event of the watch follows
	// it.
	TypeUnwatched = "unwatched"
	// TypeSession answers an openSession (11): sessionId (the session's
	// secret id) and ttl.
	TypeSession = "session"
	// TypeSessionRenewed answers a renewSession (12): sessionId and ttl.
	TypeSessionRenewed = "sessionRenewed"
	// TypeSessionClosed answers a closeSession (13): every lease of the
	// session is released.
	TypeSessionClosed = "sessionClosed"
)

// Event types (the event field of an "event" message), lock.EventType's
// names.
const (
	EventHolder   = "holder"
	EventSynced   = "synced"
	EventGranted  = "granted"
	EventReleased = "released"
	EventExpired  = "expired"
	// EventError ends the watch: success false, error {code, message}.
	EventError = "error"
)

// Modes (the mode field), lock.Mode's names. Absent means exclusive.
const (
	ModeExclusive = "exclusive"
	ModeShared    = "shared"
)

// FeaturesHeader is the response header of the WebSocket upgrade that
// lists what the gateway's backend offers beyond the protocol's core, comma
// separated: FeatureWanted when holders get "wanted" pushes, and the names
// of lock.Features.Names ("shared", "semaphore", "multikey", "watch",
// "lockdelay") for the other primitives, "sessions" for sessions, and
// "watchprefix" when a watch (9) may set prefix (lock.FeatureWatchPrefix).
// REST answers carry it too.
const (
	FeaturesHeader = "Lockgate-Features"
	FeatureWanted  = "wanted"
	// FeatureTraceparent: the gateway reads a request's traceparent. A
	// client sends the field only to a gateway that announces it: an
	// older one refuses fields it does not know.
	FeatureTraceparent = "traceparent"
)

// MaxIDLen bounds a request id.
const MaxIDLen = 64

// FencingToken is a fencing token on the wire: {"key", "value"}. Decoding
// also accepts a bare number, or the value as a string.
type FencingToken struct {
	Key   string `json:"key"`
	Value uint64 `json:"value"`
}

// UnmarshalJSON accepts {"key", "value"}, a number, or a numeric string.
func (t *FencingToken) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	if len(b) == 0 || bytes.Equal(b, []byte("null")) {
		return nil
	}
	if b[0] != '{' {
		v, err := parseUint(b)
		t.Value = v
		return err
	}
	var o struct {
		Key   string          `json:"key"`
		Value json.RawMessage `json:"value"`
	}
	if err := CheckFields(b, &o); err != nil {
		return err
	}
	if err := json.Unmarshal(b, &o); err != nil {
		return err
	}
	t.Key = o.Key
	if len(o.Value) > 0 {
		v, err := parseUint(o.Value)
		if err != nil {
			return err
		}
		t.Value = v
	}
	return nil
}

// parseUint reads a JSON number or a JSON string holding one.
func parseUint(b []byte) (uint64, error) {
	if len(b) > 0 && b[0] == '"' {
		var s string
		if err := json.Unmarshal(b, &s); err != nil {
			return 0, err
		}
		b = []byte(s)
	}
	return strconv.ParseUint(string(b), 10, 64)
}

// Request is one client message.
type Request struct {
	ID                  string        `json:"id"`
	CommandType         int           `json:"commandType"`
	Key                 string        `json:"key,omitempty"`
	ClientID            string        `json:"clientId,omitempty"`
	TTL                 int64         `json:"ttl,omitempty"` // ms
	Value               *string       `json:"value,omitempty"`
	LockToken           string        `json:"lockToken,omitempty"`
	FencingToken        *FencingToken `json:"fencingToken,omitempty"`
	Ack                 bool          `json:"ack,omitempty"`
	ReleaseOnDisconnect bool          `json:"releaseOnDisconnect,omitempty"`
	Target              string        `json:"target,omitempty"`
	// WaitMS bounds an acquire's wait on the server (ms); past it the
	// acquire is answered with code timeout. 0: wait until cancelled.
	WaitMS int64 `json:"waitMs,omitempty"`
	// Mode is "exclusive" (or absent) or "shared" (1, 5, 7, 8).
	Mode string `json:"mode,omitempty"`
	// Permits, when positive, makes the acquire one of Permits semaphore
	// holders (1, 5, 7, 8).
	Permits int `json:"permits,omitempty"`
	// LockDelayMS, when positive, keeps the key from being granted again
	// for that long after this lease expires (1, 5, 7, 8).
	LockDelayMS int64 `json:"lockDelayMs,omitempty"`
	// Keys are the keys of an acquireAll or tryAcquireAll (7, 8).
	Keys []string `json:"keys,omitempty"`
	// SessionID names a session: the one to renew or close (12, 13), or
	// the one an acquire's leases belong to (1, 5, 7, 8).
	SessionID string `json:"sessionId,omitempty"`
	// Prefix, on a watch (9), watches every key starting with key ("" for
	// every key) instead of key alone: no holder events first, and each
	// event carries its own key (feature "watchprefix").
	Prefix bool `json:"prefix,omitempty"`
	// Traceparent, optional on any command, is the caller's trace context
	// in the W3C Trace Context "traceparent" form
	// (00-<trace id>-<span id>-<flags>): the server's spans of the request
	// join that trace. A gateway that reads it says so with
	// FeatureTraceparent; a malformed value is ignored, never refused.
	Traceparent string `json:"traceparent,omitempty"`
}

// Reply is one server message: a reply to a request (same id) or a push.
type Reply struct {
	ID           string        `json:"id,omitempty"`
	Type         string        `json:"type"`
	Success      bool          `json:"success"`
	Key          string        `json:"key,omitempty"`
	FencingToken *FencingToken `json:"fencingToken,omitempty"`
	LockToken    string        `json:"lockToken,omitempty"`
	TTL          int64         `json:"ttl,omitempty"` // ms
	Owner        string        `json:"owner,omitempty"`
	Value        *string       `json:"value,omitempty"`
	ExpiresIn    *int64        `json:"expiresIn,omitempty"` // ms
	Waiters      *int          `json:"waiters,omitempty"`
	// Wanted on a grant: another caller already waits for the key (the
	// lease was handed over down a queue), so no "wanted" push follows.
	Wanted bool `json:"wanted,omitempty"`
	// Mode and Permits: how a grant, an info's key or an event's holder
	// holds the key; absent for exclusive (and Permits for a read lock).
	Mode    string `json:"mode,omitempty"`
	Permits int    `json:"permits,omitempty"`
	// Event is the change an "event" message reports (Event* constants);
	// Revision orders a watch's events where the backend has one.
	Event    string `json:"event,omitempty"`
	Revision uint64 `json:"revision,omitempty"`
	// Holders, on an info of a shared key (read lock or semaphore), lists
	// every holder, oldest grant first.
	Holders []HolderInfo `json:"holders,omitempty"`
	// Leases, on "grants", are the grants of an acquireAll, in the order
	// of its keys.
	Leases []Grant `json:"leases,omitempty"`
	// SessionID, on "session" and "sessionRenewed", is the session; on a
	// grant, the session the lease belongs to (its ttl is the session's).
	SessionID string `json:"sessionId,omitempty"`
	Error     *Error `json:"error,omitempty"`
}

// HolderInfo is one holder of a shared key in an info's holders.
type HolderInfo struct {
	Owner        string        `json:"owner,omitempty"`
	FencingToken *FencingToken `json:"fencingToken,omitempty"`
	Value        *string       `json:"value,omitempty"`
	ExpiresIn    *int64        `json:"expiresIn,omitempty"` // ms
}

// Grant is one lease of a "grants" message: the fields of a "grant".
type Grant struct {
	Key          string        `json:"key"`
	FencingToken *FencingToken `json:"fencingToken,omitempty"`
	LockToken    string        `json:"lockToken,omitempty"`
	TTL          int64         `json:"ttl,omitempty"` // ms
	Owner        string        `json:"owner,omitempty"`
	Mode         string        `json:"mode,omitempty"`
	Permits      int           `json:"permits,omitempty"`
	Wanted       bool          `json:"wanted,omitempty"`
	SessionID    string        `json:"sessionId,omitempty"`
}

// Error is the error object of both protocols: a stable code, a message,
// and detail where it helps.
type Error struct {
	Code    string  `json:"code"`
	Message string  `json:"message"`
	Leader  *Leader `json:"leader,omitempty"`
	Holder  *Holder `json:"holder,omitempty"`
	// RetryIn, on delayed, is about how long (ms) until the key's
	// lock-delay ends; on rate_limited, how long until the caller's
	// identity may send the request again.
	RetryIn int64 `json:"retryIn,omitempty"`
	// Feature, on unsupported, names the feature the backend lacks
	// (lock.Features.Names).
	Feature string `json:"feature,omitempty"`
	// Quota, on quota_exceeded, names the quota the caller's identity is
	// at: "sessions", "leases", "waiters" or "watches".
	Quota string `json:"quota,omitempty"`
}

// Leader names the leader in a not_leader error.
type Leader struct {
	ID   string `json:"id,omitempty"`
	Addr string `json:"addr,omitempty"`
}

// Holder names the current holder in a held error. Its fencingToken has
// the one shape of every message, {"key", "value"} (protocol v1; a bare
// number, what servers sent before, is still read).
type Holder struct {
	Owner        string        `json:"owner,omitempty"`
	FencingToken *FencingToken `json:"fencingToken,omitempty"`
	ExpiresIn    int64         `json:"expiresIn,omitempty"` // ms
}
