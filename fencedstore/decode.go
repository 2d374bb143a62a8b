package fencedstore

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"unicode/utf16"
	"unicode/utf8"
)

// The body of POST /write is decoded strictly: exactly one JSON object of
// the documented fields (an unknown field, `null`, or anything after the
// object is bad_json), and text that encoding/json would silently rewrite
// to U+FFFD (invalid UTF-8, an unpaired surrogate escape) is refused rather
// than stored as something the client did not send: in a key it is
// invalid_key (two different byte strings must not become one key, as they
// would become one lock), in a clientID invalid_client_id, in data bad_json.

// wireRequest is WriteRequest as it is decoded from the wire.
type wireRequest struct {
	ClientID text       `json:"clientID"`
	Token    *wireToken `json:"fencingToken"`
	Data     text       `json:"data"`
}

type wireToken struct {
	Key   text    `json:"key"`
	Value *uint64 `json:"value"`
}

// text is a JSON string that remembers whether its raw form held text that
// decoding altered. null leaves it empty, as it would a string.
type text struct {
	s       string
	altered bool
}

func (t *text) UnmarshalJSON(raw []byte) error {
	if string(raw) == "null" {
		return nil
	}
	if err := json.Unmarshal(raw, &t.s); err != nil {
		return err
	}
	t.altered = alteredByDecoding(raw)
	return nil
}

// alteredByDecoding reports whether the JSON string literal raw (already
// known to be well-formed) holds invalid UTF-8 or a \u escape of a
// surrogate that is not half of a valid pair: what encoding/json turns into
// U+FFFD.
func alteredByDecoding(raw []byte) bool {
	if !utf8.Valid(raw) {
		return true
	}
	for i := 0; i < len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		i++
		if raw[i] != 'u' {
			continue
		}
		r := hex4(raw[i+1 : i+5])
		i += 4
		if !utf16.IsSurrogate(r) {
			continue
		}
		if r < 0xdc00 && i+6 < len(raw) && raw[i+1] == '\\' && raw[i+2] == 'u' {
			if lo := hex4(raw[i+3 : i+7]); 0xdc00 <= lo && lo < 0xe000 {
				i += 6
				continue
			}
		}
		return true
	}
	return false
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b {
		r <<= 4
		switch {
		case '0' <= c && c <= '9':
			r |= rune(c - '0')
		case 'a' <= c && c <= 'f':
			r |= rune(c - 'a' + 10)
		case 'A' <= c && c <= 'F':
			r |= rune(c - 'A' + 10)
		}
	}
	return r
}

// decodeWrite reads one write request from body. The error body it returns
// carries code bad_json, invalid_key, invalid_client_id, invalid or
// too_large; field limits are left to WriteRequest.Validate.
func decodeWrite(body io.Reader) (WriteRequest, *errorBody) {
	dec := json.NewDecoder(body)
	dec.DisallowUnknownFields()
	var w *wireRequest
	err := dec.Decode(&w)
	if err == nil {
		switch _, terr := dec.Token(); {
		case terr == nil:
			err = errors.New("trailing data after the JSON object")
		case terr != io.EOF:
			err = fmt.Errorf("after the JSON object: %w", terr)
		}
	}
	if err == nil && w == nil {
		err = errors.New("body is null, want a JSON object")
	}
	if err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			return WriteRequest{}, &errorBody{Code: CodeTooLarge, Message: fmt.Sprintf("body exceeds %d bytes", mbe.Limit)}
		}
		return WriteRequest{}, &errorBody{Code: CodeBadJSON, Message: "malformed write request: " + err.Error()}
	}
	switch {
	case w.Token == nil:
		return WriteRequest{}, &errorBody{Code: CodeInvalid, Message: ErrInvalid.Error() + `: fencingToken {"key", "value"} is required`}
	case w.Token.Key.altered:
		return WriteRequest{}, &errorBody{Code: CodeInvalidKey, Message: ErrInvalidKey.Error() + " is not valid UTF-8 (or holds an unpaired surrogate escape)"}
	case w.Token.Value == nil:
		return WriteRequest{}, &errorBody{Code: CodeInvalid, Message: ErrInvalid.Error() + ": fencingToken.value is required"}
	case w.ClientID.altered:
		return WriteRequest{}, &errorBody{Code: CodeInvalidClientID, Message: ErrInvalidClientID.Error() + " is not valid UTF-8 (or holds an unpaired surrogate escape)"}
	case w.Data.altered:
		return WriteRequest{}, &errorBody{Code: CodeBadJSON, Message: "malformed write request: data is not valid UTF-8 (or holds an unpaired surrogate escape); encode binary data, e.g. base64"}
	}
	return WriteRequest{
		ClientID: w.ClientID.s,
		Token:    FencingToken{Key: w.Token.Key.s, Value: *w.Token.Value},
		Data:     w.Data.s,
	}, nil
}
