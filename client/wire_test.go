package client

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// TestWireToken: a fencing token decodes from {key, value}, a bare number
// (a held error's holder) or a numeric string.
func TestWireToken(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want wire.FencingToken
	}{
		{`{"key":"k","value":42}`, wire.FencingToken{Key: "k", Value: 42}},
		{`{"key":"k","value":"18446744073709551615"}`, wire.FencingToken{Key: "k", Value: 1<<64 - 1}},
		{`7`, wire.FencingToken{Value: 7}},
		{`"9"`, wire.FencingToken{Value: 9}},
		{`null`, wire.FencingToken{}},
	} {
		var got wire.FencingToken
		if err := json.Unmarshal([]byte(tc.in), &got); err != nil || got != tc.want {
			t.Errorf("decode %s = %+v, %v; want %+v", tc.in, got, err, tc.want)
		}
	}
	var bad wire.FencingToken
	if err := json.Unmarshal([]byte(`{"value":-1}`), &bad); err == nil {
		t.Error("a negative token decoded without error")
	}
}

// TestReplyError: every error code of docs/protocol.md maps to the lock
// contract's error for it.
func TestReplyError(t *testing.T) {
	decode := func(s string) *reply {
		r := &reply{}
		if err := json.Unmarshal([]byte(s), r); err != nil {
			t.Fatal(err)
		}
		r.arrived = time.Now()
		return r
	}
	for code, want := range map[string]error{
		"not_held":         lock.ErrNotHeld,
		"not_found":        lock.ErrNotFound,
		"invalid_key":      lock.ErrInvalidKey,
		"invalid_ttl":      lock.ErrInvalidTTL,
		"invalid_value":    lock.ErrInvalidValue,
		"invalid_owner":    lock.ErrInvalidOwner,
		"invalid_handle":   lock.ErrInvalidHandle,
		"unavailable":      lock.ErrUnavailable,
		"closed":           lock.ErrUnavailable,
		"too_many_waiters": lock.ErrUnavailable,
	} {
		err := replyError(decode(`{"id":"1","type":"error","error":{"code":"`+code+`","message":"m"}}`), "k")
		if !errors.Is(err, want) {
			t.Errorf("code %s: %v, want an error matching %v", code, err, want)
		}
	}
	err := replyError(decode(`{"type":"error","error":{"code":"held","holder":{"owner":"o","fencingToken":5,"expiresIn":1000}}}`), "k")
	var he *lock.HeldError
	if !errors.As(err, &he) || he.Owner != "o" || he.Token != 5 || he.Key != "k" || time.Until(he.Expires) <= 0 {
		t.Errorf("held: %#v, want a *lock.HeldError naming owner o, token 5, a future expiry", err)
	}
	if !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("held: %v does not match ErrNotAcquired", err)
	}
	err = replyError(decode(`{"type":"error","error":{"code":"not_leader","leader":{"id":"2","addr":"h:1"}}}`), "k")
	var nl *lock.NotLeaderError
	if !errors.As(err, &nl) || nl.LeaderID != "2" || nl.LeaderAddr != "h:1" || !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("not_leader: %#v, want a *lock.NotLeaderError naming 2 at h:1", err)
	}
	var ve *lock.ValidationError
	if err := replyError(decode(`{"type":"error","error":{"code":"invalid_ttl","message":"m"}}`), "k"); !errors.As(err, &ve) || ve.Field != "ttl" {
		t.Errorf("invalid_ttl: %#v, want a *lock.ValidationError for field ttl", err)
	}
	var se *ServerError
	if err := replyError(decode(`{"type":"error","error":{"code":"internal","message":"bug"}}`), "k"); !errors.As(err, &se) || se.Code != "internal" {
		t.Errorf("internal: %#v, want a *ServerError", err)
	}
}

// TestReplyErrorEveryCode: the error built for each code of the protocol's
// table matches the code's sentinel and no other lock sentinel, an
// invalid_* code names its field, and a ServerError keeps the code.
func TestReplyErrorEveryCode(t *testing.T) {
	sentinels := []error{lock.ErrNotAcquired, lock.ErrNotHeld, lock.ErrNotFound, lock.ErrUnavailable, lock.ErrClosed,
		lock.ErrInvalidKey, lock.ErrInvalidTTL, lock.ErrInvalidValue, lock.ErrInvalidOwner, lock.ErrInvalidHandle,
		lock.ErrNilLease, lock.ErrNotLeader}
	for _, c := range wire.Codes {
		r := &reply{Reply: wire.Reply{ID: "1", Type: wire.TypeError, Error: &wire.Error{Code: c.Name, Message: "m"}}, arrived: time.Now()}
		err := replyError(r, "k")
		for _, s := range sentinels {
			want := s == c.Sentinel || c.Name == wire.CodeNotLeader && s == lock.ErrUnavailable // a NotLeaderError is also an outage
			if errors.Is(err, s) != want {
				t.Errorf("code %s: errors.Is(%v, %v) = %v", c.Name, err, s, !want)
			}
		}
		var ve *lock.ValidationError
		if errors.As(err, &ve) != (c.Field != "") || c.Field != "" && ve.Field != c.Field {
			t.Errorf("code %s: %#v, want a *lock.ValidationError exactly for field %q", c.Name, err, c.Field)
		}
		var se *ServerError
		if errors.As(err, &se) && se.Code != c.Name {
			t.Errorf("code %s: a ServerError with code %s", c.Name, se.Code)
		}
	}
}

func TestWSURL(t *testing.T) {
	for in, want := range map[string]string{
		"127.0.0.1:50051":           "ws://127.0.0.1:50051/v1/ws",
		"http://h:1":                "ws://h:1/v1/ws",
		"https://h:1/":              "wss://h:1/v1/ws",
		"ws://h:1/custom/ws":        "ws://h:1/custom/ws",
		"wss://h.example.com/v1/ws": "wss://h.example.com/v1/ws",
	} {
		if got, err := wsURL(in, false); err != nil || got != want {
			t.Errorf("wsURL(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	// A TLS client dials bare addresses (and redirects) as wss://.
	if got, _ := wsURL("127.0.0.1:50051", true); got != "wss://127.0.0.1:50051/v1/ws" {
		t.Errorf("secure wsURL of a bare address = %q", got)
	}
	for _, bad := range []string{"ftp://h:1", "http://", "://"} {
		if _, err := wsURL(bad, false); err == nil {
			t.Errorf("wsURL(%q) accepted", bad)
		}
	}
}

// TestNewRejects: New needs at least one valid endpoint and never blocks.
func TestNewRejects(t *testing.T) {
	if _, err := New(nil, Options{}); err == nil {
		t.Error("New with no endpoints succeeded")
	}
	if _, err := New([]string{"ftp://x"}, Options{}); err == nil {
		t.Error("New with a bad endpoint succeeded")
	}
}
