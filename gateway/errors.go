package gateway

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"time"
	"unicode/utf16"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// apiError is the error object of both protocols (docs/protocol.md, "Error
// codes") with the HTTP status REST answers it with.
type apiError struct {
	wire.Error
	status int
}

// newError builds the error of code, with the status wire.Codes gives it.
func newError(code, msg string) *apiError {
	return &apiError{Error: wire.Error{Code: code, Message: msg}, status: wire.Status(code)}
}

// toAPIError maps the lock contract's errors onto the protocol's codes
// (wire.CodeOf), with the leader or holder a structured error names.
func toAPIError(err error) *apiError {
	if errors.Is(err, errWaitTimedOut) {
		return newError(wire.CodeTimeout, err.Error())
	}
	e := newError(wire.CodeOf(err), err.Error())
	var nl *lock.NotLeaderError
	var he *lock.HeldError
	var de *lock.DelayedError
	var ue *lock.UnsupportedError
	var qe *QuotaError
	var re *RateError
	switch {
	case e.Code == wire.CodeQuotaExceeded && errors.As(err, &qe):
		e.Quota = qe.Quota
	case e.Code == wire.CodeRateLimited && errors.As(err, &re):
		e.RetryIn = max(durationMS(re.RetryIn), 1)
	case e.Code == wire.CodeDelayed && errors.As(err, &de):
		e.RetryIn = max(durationMS(time.Until(de.Until)), 1)
	case e.Code == wire.CodeUnsupported && errors.As(err, &ue):
		e.Feature = ue.Feature.String()
	case e.Code == wire.CodeNotLeader && errors.As(err, &nl):
		e.Leader = &wire.Leader{ID: nl.LeaderID, Addr: nl.LeaderAddr}
	case e.Code == wire.CodeHeld && errors.As(err, &he):
		e.Holder = &wire.Holder{Owner: he.Owner}
		if he.Token != 0 {
			e.Holder.FencingToken = &wire.FencingToken{Key: he.Key, Value: uint64(he.Token)}
		}
		if !he.Expires.IsZero() {
			e.Holder.ExpiresIn = max(durationMS(time.Until(he.Expires)), 0)
		}
	}
	return e
}

// checkObject answers bad_json unless data starts (after white space) a
// JSON object without lone surrogate escapes. encoding/json alone is not enough: it decodes `null` into a
// struct as "no fields" (a REST `null` body was a grant). The decoders
// used after it (json.Unmarshal, wire.DecodeRequest, decodeStrict) refuse
// anything after the object.
func checkObject(data []byte) *apiError {
	if i := bytes.IndexFunc(data, notJSONSpace); i < 0 || data[i] != '{' {
		return newError(wire.CodeBadJSON, "malformed JSON: the message must be one JSON object")
	}
	if loneSurrogate(data) {
		return newError(wire.CodeBadJSON, "malformed JSON: a \\u escape names half of a UTF-16 surrogate pair, not a character")
	}
	return nil
}

func notJSONSpace(r rune) bool { return r != ' ' && r != '\t' && r != '\n' && r != '\r' }

// decodeStrict is json.Unmarshal refusing unknown fields, as REST does.
// Like json.Unmarshal (and unlike a bare Decoder, which stops after the
// first value: trailing data went unnoticed), it refuses anything after
// the value.
func decodeStrict(data []byte, v any) error {
	if err := wire.CheckFields(data, v); err != nil {
		return err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if rest := data[dec.InputOffset():]; bytes.IndexFunc(rest, notJSONSpace) >= 0 {
		return errors.New("data after the JSON object")
	}
	return nil
}

// loneSurrogate reports whether JSON text has a \u escape of a UTF-16
// surrogate that is not half of a high-low pair. encoding/json decodes one
// to U+FFFD, so that keys "a\ud800" and "a\udbff" would name one lock, as
// invalid UTF-8 did. Malformed escapes are left to the decoder.
func loneSurrogate(data []byte) bool {
	if !bytes.Contains(data, []byte(`\u`)) {
		return false
	}
	in := false
	for i := 0; i < len(data); i++ {
		switch c := data[i]; {
		case !in:
			in = c == '"'
		case c == '"':
			in = false
		case c == '\\':
			r, ok := escapedRune(data[i:])
			switch {
			case !ok:
				i++ // a one-character escape, or malformed
			case !utf16.IsSurrogate(r):
				i += 5
			case r >= 0xdc00: // a low half first
				return true
			default:
				if r2, ok := escapedRune(data[i+6:]); !ok || r2 < 0xdc00 || r2 > 0xdfff {
					return true
				}
				i += 11
			}
		}
	}
	return false
}

// escapedRune reads a \uXXXX escape at the start of b.
func escapedRune(b []byte) (rune, bool) {
	if len(b) < 6 || b[0] != '\\' || b[1] != 'u' {
		return 0, false
	}
	v, err := strconv.ParseUint(string(b[2:6]), 16, 16)
	return rune(v), err == nil
}
