package client

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
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

// TestReplyErrorTenants: rate_limited is a *RateLimitedError carrying
// retryIn, quota_exceeded a ServerError naming the quota, forbidden a
// ServerError matching lock.ErrForbidden.
func TestReplyErrorTenants(t *testing.T) {
	r := &reply{Reply: wire.Reply{Type: wire.TypeError, Error: &wire.Error{Code: wire.CodeRateLimited, Message: "slow down", RetryIn: 250}}, arrived: time.Now()}
	err := replyError(r, "k")
	var rl *RateLimitedError
	if !errors.As(err, &rl) || rl.RetryIn != 250*time.Millisecond || !rl.Until.Equal(r.arrived.Add(250*time.Millisecond)) || rl.Key != "k" {
		t.Errorf("rate_limited: %#v, want a *RateLimitedError for k, retry in 250ms", err)
	}
	if !errors.Is(err, lock.ErrRateLimited) || !strings.Contains(err.Error(), "250ms") {
		t.Errorf("rate_limited: %v does not match ErrRateLimited or name its wait", err)
	}
	r.Error = &wire.Error{Code: wire.CodeQuotaExceeded, Message: "at most 2", Quota: "sessions"}
	err = replyError(r, "")
	var se *ServerError
	if !errors.As(err, &se) || se.Quota != "sessions" || !errors.Is(err, lock.ErrQuotaExceeded) || !strings.Contains(err.Error(), `"sessions"`) {
		t.Errorf("quota_exceeded: %#v, want a ServerError naming quota sessions, matching ErrQuotaExceeded", err)
	}
	r.Error = &wire.Error{Code: wire.CodeForbidden, Message: "not yours"}
	if err := replyError(r, "k"); !errors.Is(err, lock.ErrForbidden) {
		t.Errorf("forbidden: %v does not match ErrForbidden", err)
	}
}

// TestWaitOutRateLimits: a waiting acquire waits the retryIn each refusal
// names before it tries again; a try returns the refusal at once.
func TestWaitOutRateLimits(t *testing.T) {
	c, err := New([]string{"127.0.0.1:1"}, Options{Backoff: lock.ConstantBackoff{Interval: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const retryIn = 120 * time.Millisecond
	tries := 0
	try := func() (int, error) {
		tries++
		if tries <= 2 {
			return 0, &RateLimitedError{Key: "k", RetryIn: retryIn}
		}
		return 7, nil
	}
	what := func() string { return "acquire" }
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	got, err := waitOutRateLimits(c, ctx, true, what, try)
	if err != nil || got != 7 || tries != 3 {
		t.Fatalf("waitOutRateLimits = %d, %v after %d tries; want 7 after 3", got, err, tries)
	}
	if took := time.Since(start); took < 2*retryIn {
		t.Errorf("two refusals of %v waited only %v", retryIn, took)
	}
	tries = 0
	if _, err := waitOutRateLimits(c, ctx, false, what, try); !errors.Is(err, lock.ErrRateLimited) || tries != 1 {
		t.Errorf("a try: %v after %d tries, want the refusal after 1", err, tries)
	}
}
