package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// Command types of the WebSocket protocol (docs/protocol.md).
const (
	cmdAcquire    = 1
	cmdRelease    = 2
	cmdRenew      = 3
	cmdInspect    = 4
	cmdTryAcquire = 5
	cmdCancel     = 6
)

// wireToken is a fencing token on the wire: {"key", "value"}. It also
// accepts a bare number (the holder of a held error carries one).
type wireToken struct {
	Key   string `json:"key,omitempty"`
	Value uint64 `json:"value"`
}

func (t *wireToken) UnmarshalJSON(b []byte) error {
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

// request is one client message.
type request struct {
	ID           string     `json:"id"`
	CommandType  int        `json:"commandType"`
	Key          string     `json:"key,omitempty"`
	ClientID     string     `json:"clientId,omitempty"`
	TTL          int64      `json:"ttl,omitempty"`
	Value        *string    `json:"value,omitempty"`
	LockToken    string     `json:"lockToken,omitempty"`
	FencingToken *wireToken `json:"fencingToken,omitempty"`
	Ack          bool       `json:"ack,omitempty"`
	Target       string     `json:"target,omitempty"`
}

// reply is one server message (a reply or a push).
type reply struct {
	ID           string     `json:"id"`
	Type         string     `json:"type"`
	Success      bool       `json:"success"`
	Key          string     `json:"key"`
	FencingToken *wireToken `json:"fencingToken"`
	LockToken    string     `json:"lockToken"`
	TTL          int64      `json:"ttl"`
	Owner        string     `json:"owner"`
	Value        *string    `json:"value"`
	ExpiresIn    *int64     `json:"expiresIn"`
	Waiters      *int       `json:"waiters"`
	Error        *wireError `json:"error"`

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
	if r.Type != "error" {
		return ""
	}
	if r.Error == nil {
		return "internal"
	}
	return r.Error.Code
}

type wireError struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Leader  *struct {
		ID   string `json:"id"`
		Addr string `json:"addr"`
	} `json:"leader"`
	Holder *struct {
		Owner        string    `json:"owner"`
		FencingToken wireToken `json:"fencingToken"`
		ExpiresIn    int64     `json:"expiresIn"`
	} `json:"holder"`
}

func (e *wireError) leader() (id, addr string) {
	if e == nil || e.Leader == nil {
		return "", ""
	}
	return e.Leader.ID, e.Leader.Addr
}

// ServerError is an error reply of the gateway that has no more specific Go
// type (HeldError and NotLeaderError have their own). It matches, with
// errors.Is, the lock sentinel of its code: not_held → lock.ErrNotHeld,
// not_found → lock.ErrNotFound, invalid_* → the matching lock.ErrInvalid*,
// unavailable/closed/too_many_waiters → lock.ErrUnavailable.
type ServerError struct {
	Code    string // the protocol's error code, e.g. "not_held"
	Message string // the gateway's explanation
	err     error  // the sentinel, or nil
}

func (e *ServerError) Error() string {
	if e.err != nil {
		return fmt.Sprintf("%v (gateway: %s: %s)", e.err, e.Code, e.Message)
	}
	return fmt.Sprintf("lockgate gateway: %s: %s", e.Code, e.Message)
}

// Unwrap returns the lock sentinel of the code, if any.
func (e *ServerError) Unwrap() error { return e.err }

// replyError turns an error reply about key into the lock contract's error.
func replyError(r *reply, key string) error {
	e := r.Error
	if e == nil {
		e = &wireError{Code: "internal", Message: "error reply without an error object"}
	}
	switch e.Code {
	case "held":
		he := &lock.HeldError{Key: key}
		if h := e.Holder; h != nil {
			he.Owner, he.Token = h.Owner, lock.Token(h.FencingToken.Value)
			if h.ExpiresIn > 0 {
				he.Expires = r.arrived.Add(time.Duration(h.ExpiresIn) * time.Millisecond)
			}
		}
		return he
	case "not_leader":
		id, addr := e.leader()
		return &lock.NotLeaderError{LeaderID: id, LeaderAddr: addr}
	case "invalid_key", "invalid_ttl", "invalid_value", "invalid_owner", "invalid_handle":
		field := e.Code[len("invalid_"):]
		return &lock.ValidationError{Field: field, Value: strconv.Quote(key), Reason: "rejected by the gateway: " + e.Message, Err: codeSentinel(e.Code)}
	}
	return &ServerError{Code: e.Code, Message: e.Message, err: codeSentinel(e.Code)}
}

func codeSentinel(code string) error {
	switch code {
	case "held":
		return lock.ErrNotAcquired
	case "not_held":
		return lock.ErrNotHeld
	case "not_found":
		return lock.ErrNotFound
	case "invalid_key":
		return lock.ErrInvalidKey
	case "invalid_ttl":
		return lock.ErrInvalidTTL
	case "invalid_value":
		return lock.ErrInvalidValue
	case "invalid_owner":
		return lock.ErrInvalidOwner
	case "invalid_handle":
		return lock.ErrInvalidHandle
	case "not_leader":
		return lock.ErrNotLeader
	case "unavailable", "closed", "too_many_waiters":
		return lock.ErrUnavailable
	}
	return nil
}

// errDropped is the cause recorded when the connection carrying a request
// failed before the request was answered.
var errDropped = errors.New("connection to the gateway lost")

// ms is d in whole milliseconds, rounded down: the server's TTL is then
// never longer than the one the client computes its deadline from.
func ms(d time.Duration) int64 { return int64(d / time.Millisecond) }
