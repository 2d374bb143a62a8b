package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strconv"
	"strings"
)

// Encoding and decoding without reflection. encoding/json costs a few µs
// per message here, and every acquire + release cycle through the gateway
// encodes and decodes four of them; these functions do the same in a
// fraction of that. They are exact: Append* produce the bytes json.Marshal
// produces, and Decode* the value json.Unmarshal produces. The decoders read
// the messages the SDK and the gateway write (known fields, spelled as in
// the struct tags, ASCII strings without escapes, integers, booleans) and
// hand anything else (unknown or differently cased fields, escapes,
// non-ASCII text, floats, nulls, repeated fields, errors) to
// encoding/json, so that what a client may send and the errors it gets are
// unchanged. FuzzDecodeRequest, FuzzDecodeReply and FuzzAppendJSON check
// both against encoding/json (all three run in `make fuzz-smoke`), and
// TestCodecCoversEveryField fails when a field of Request or Reply is
// missing from them.

// AppendJSON appends r as json.Marshal encodes it.
func (r *Request) AppendJSON(b []byte) []byte {
	b = append(b, `{"id":`...)
	b = appendString(b, r.ID)
	b = append(b, `,"commandType":`...)
	b = strconv.AppendInt(b, int64(r.CommandType), 10)
	b = appendStringField(b, `,"key":`, r.Key)
	b = appendStringField(b, `,"clientId":`, r.ClientID)
	b = appendIntField(b, `,"ttl":`, r.TTL)
	if r.Value != nil {
		b = append(b, `,"value":`...)
		b = appendString(b, *r.Value)
	}
	b = appendStringField(b, `,"lockToken":`, r.LockToken)
	if r.FencingToken != nil {
		b = append(b, `,"fencingToken":`...)
		b = r.FencingToken.appendJSON(b)
	}
	if r.Ack {
		b = append(b, `,"ack":true`...)
	}
	if r.ReleaseOnDisconnect {
		b = append(b, `,"releaseOnDisconnect":true`...)
	}
	b = appendStringField(b, `,"target":`, r.Target)
	b = appendIntField(b, `,"waitMs":`, r.WaitMS)
	b = appendStringField(b, `,"mode":`, r.Mode)
	b = appendIntField(b, `,"permits":`, int64(r.Permits))
	b = appendIntField(b, `,"lockDelayMs":`, r.LockDelayMS)
	if len(r.Keys) != 0 {
		b = append(b, `,"keys":[`...)
		for i, k := range r.Keys {
			if i > 0 {
				b = append(b, ',')
			}
			b = appendString(b, k)
		}
		b = append(b, ']')
	}
	b = appendStringField(b, `,"sessionId":`, r.SessionID)
	if r.Prefix {
		b = append(b, `,"prefix":true`...)
	}
	return append(b, '}')
}

// AppendJSON appends r as json.Marshal encodes it.
func (r *Reply) AppendJSON(b []byte) []byte {
	if r.Error != nil || len(r.Holders) != 0 || len(r.Leases) != 0 {
		// Rare, and nested: not worth a hand-written copy.
		data, err := json.Marshal(r)
		if err != nil { // cannot happen: every field encodes
			panic(err)
		}
		return append(b, data...)
	}
	b = append(b, '{')
	if r.ID != "" {
		b = append(b, `"id":`...)
		b = appendString(b, r.ID)
		b = append(b, ',')
	}
	b = append(b, `"type":`...)
	b = appendString(b, r.Type)
	b = append(b, `,"success":`...)
	b = strconv.AppendBool(b, r.Success)
	b = appendStringField(b, `,"key":`, r.Key)
	if r.FencingToken != nil {
		b = append(b, `,"fencingToken":`...)
		b = r.FencingToken.appendJSON(b)
	}
	b = appendStringField(b, `,"lockToken":`, r.LockToken)
	b = appendIntField(b, `,"ttl":`, r.TTL)
	b = appendStringField(b, `,"owner":`, r.Owner)
	if r.Value != nil {
		b = append(b, `,"value":`...)
		b = appendString(b, *r.Value)
	}
	if r.ExpiresIn != nil {
		b = append(b, `,"expiresIn":`...)
		b = strconv.AppendInt(b, *r.ExpiresIn, 10)
	}
	if r.Waiters != nil {
		b = append(b, `,"waiters":`...)
		b = strconv.AppendInt(b, int64(*r.Waiters), 10)
	}
	if r.Wanted {
		b = append(b, `,"wanted":true`...)
	}
	b = appendStringField(b, `,"mode":`, r.Mode)
	b = appendIntField(b, `,"permits":`, int64(r.Permits))
	b = appendStringField(b, `,"event":`, r.Event)
	if r.Revision != 0 {
		b = append(b, `,"revision":`...)
		b = strconv.AppendUint(b, r.Revision, 10)
	}
	b = appendStringField(b, `,"sessionId":`, r.SessionID)
	return append(b, '}')
}

// appendStringField appends field (`,"name":`) and s, unless s is empty
// (omitempty).
func appendStringField(b []byte, field, s string) []byte {
	if s == "" {
		return b
	}
	return appendString(append(b, field...), s)
}

// appendIntField appends field (`,"name":`) and v, unless v is 0
// (omitempty).
func appendIntField(b []byte, field string, v int64) []byte {
	if v == 0 {
		return b
	}
	return strconv.AppendInt(append(b, field...), v, 10)
}

func (t *FencingToken) appendJSON(b []byte) []byte {
	b = append(b, `{"key":`...)
	b = appendString(b, t.Key)
	b = append(b, `,"value":`...)
	b = strconv.AppendUint(b, t.Value, 10)
	return append(b, '}')
}

// appendString appends s as a JSON string the way encoding/json does:
// plain ASCII is copied; anything that encoding/json escapes or checks
// (quotes, backslashes, control characters, <, >, &, non-ASCII) makes it
// encode s itself.
func appendString(b []byte, s string) []byte {
	for i := 0; i < len(s); i++ {
		if !plain(s[i]) {
			data, _ := json.Marshal(s) // a string always encodes
			return append(b, data...)
		}
	}
	b = append(b, '"')
	b = append(b, s...)
	return append(b, '"')
}

// plain reports whether encoding/json copies c as it is, and decodes it as
// itself, in a string.
func plain(c byte) bool {
	return c >= 0x20 && c < 0x80 && c != '"' && c != '\\' && c != '<' && c != '>' && c != '&'
}

// DecodeRequest decodes data into *r as json.Unmarshal(data, r) does; r
// must be the zero Request.
func DecodeRequest(data []byte, r *Request) error {
	if fastRequest(data, r) {
		return nil
	}
	*r = Request{}
	return json.Unmarshal(data, r)
}

// DecodeRequestStrict decodes data into *r as DecodeRequest does, but
// refuses what protocol v1 refuses: a field the Request does not have, a
// field named in another case than its documented name ("TTL" for "ttl":
// encoding/json would take it), and anything after the object. The fast
// path accepts only exact documented names, so only the fallback checks.
func DecodeRequestStrict(data []byte, r *Request) error {
	if fastRequest(data, r) {
		return nil
	}
	*r = Request{}
	if err := CheckFieldNames(data, requestFields); err != nil {
		return err
	}
	return json.Unmarshal(data, r)
}

// CheckFields reports a top-level field of the JSON object in data that
// v's struct type (v a pointer to it) does not have under exactly that
// JSON name: encoding/json, even refusing unknown fields, takes "TTL_MS"
// for "ttl_ms". Other errors are left to the decoder.
func CheckFields(data []byte, v any) error {
	t := reflect.TypeOf(v)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	return CheckFieldNames(data, jsonNames(t))
}

// requestFields are the JSON names of Request's fields.
var requestFields = jsonNames(reflect.TypeOf(Request{}))

// jsonNames lists the JSON names of a struct type's fields, with those of
// an embedded struct without a JSON name, which encoding/json promotes.
func jsonNames(t reflect.Type) map[string]bool {
	m := map[string]bool{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
			for n := range jsonNames(f.Type) {
				m[n] = true
			}
			continue
		}
		m[name] = true
	}
	return m
}

// UnknownFieldError names a field a v1 message does not have.
type UnknownFieldError struct{ Name string }

func (e *UnknownFieldError) Error() string {
	return fmt.Sprintf("unknown field %q (field names are case-sensitive; see docs/protocol.md)", e.Name)
}

// CheckFieldNames reports the first top-level field of the JSON object in
// data that is not in names, exactly as spelled, or a syntax error.
func CheckFieldNames(data []byte, names map[string]bool) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	if t, err := dec.Token(); err != nil || t != json.Delim('{') {
		return nil // not an object: the decoder's own error follows
	}
	for dec.More() {
		t, err := dec.Token()
		if err != nil {
			return err
		}
		name, _ := t.(string)
		if !names[name] {
			return &UnknownFieldError{Name: name}
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return err
		}
	}
	return nil
}

// DecodeReply decodes data into *r as json.Unmarshal(data, r) does; r must
// be the zero Reply.
func DecodeReply(data []byte, r *Reply) error {
	if fastReply(data, r) {
		return nil
	}
	*r = Reply{}
	return json.Unmarshal(data, r)
}

// scanner reads the subset of JSON the fast decoders accept. Every method
// reports false for anything outside it; the caller then falls back.
type scanner struct {
	b []byte
	i int
}

func (s *scanner) space() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// byte consumes c (after white space).
func (s *scanner) byte(c byte) bool {
	s.space()
	if s.i < len(s.b) && s.b[s.i] == c {
		s.i++
		return true
	}
	return false
}

// str reads a string of plain characters (no escapes, ASCII only). The
// result aliases the input.
func (s *scanner) str() ([]byte, bool) {
	s.space()
	if s.i >= len(s.b) || s.b[s.i] != '"' {
		return nil, false
	}
	start := s.i + 1
	for j := start; j < len(s.b); j++ {
		c := s.b[j]
		if c == '"' {
			s.i = j + 1
			return s.b[start:j], true
		}
		// < > & are plain for the decoder; control characters, escapes
		// and non-ASCII bytes are left to encoding/json.
		if c < 0x20 || c >= 0x80 || c == '\\' {
			return nil, false
		}
	}
	return nil, false
}

// digits reads an unsigned integer of at most max digits without leading
// zeros, followed by a delimiter.
func (s *scanner) digits(max int) (uint64, bool) {
	start := s.i
	var v uint64
	for s.i < len(s.b) && s.b[s.i] >= '0' && s.b[s.i] <= '9' {
		v = v*10 + uint64(s.b[s.i]-'0')
		s.i++
	}
	n := s.i - start
	if n == 0 || n > max || n > 1 && s.b[start] == '0' {
		return 0, false
	}
	if s.i < len(s.b) {
		switch s.b[s.i] {
		case ',', '}', ' ', '\t', '\n', '\r':
		default:
			return 0, false // a fraction, an exponent, or garbage
		}
	}
	return v, true
}

// int reads an integer of at most max digits (18 fit an int64, 9 an int
// on any platform).
func (s *scanner) int(max int) (int64, bool) {
	s.space()
	neg := s.i < len(s.b) && s.b[s.i] == '-'
	if neg {
		s.i++
	}
	v, ok := s.digits(max)
	if neg {
		return -int64(v), ok
	}
	return int64(v), ok
}

// text reads a string as str does, as a string.
func (s *scanner) text() (string, bool) {
	str, ok := s.str()
	return string(str), ok
}

// smallInt reads an integer of at most 9 digits, as an int.
func (s *scanner) smallInt() (int, bool) {
	v, ok := s.int(9)
	return int(v), ok
}

func (s *scanner) uint() (uint64, bool) {
	s.space()
	return s.digits(19)
}

func (s *scanner) bool() (bool, bool) {
	s.space()
	switch {
	case hasPrefix(s.b[s.i:], "true"):
		s.i += 4
		return true, s.delim()
	case hasPrefix(s.b[s.i:], "false"):
		s.i += 5
		return false, s.delim()
	}
	return false, false
}

// delim reports whether the next byte ends a value.
func (s *scanner) delim() bool {
	if s.i >= len(s.b) {
		return true
	}
	switch s.b[s.i] {
	case ',', '}', ' ', '\t', '\n', '\r':
		return true
	}
	return false
}

func hasPrefix(b []byte, p string) bool {
	return len(b) >= len(p) && string(b[:len(p)]) == p
}

// object reads {"name": value, ...}, calling field for each member with
// the scanner before the value; field reads the value. It fails on a
// repeated name (seen by field's index).
func (s *scanner) object(field func(name []byte) (index int, ok bool)) bool {
	if !s.byte('{') {
		return false
	}
	if s.byte('}') {
		return true
	}
	var seen uint32
	for {
		name, ok := s.str()
		if !ok || !s.byte(':') {
			return false
		}
		idx, ok := field(name)
		if !ok || seen&(1<<idx) != 0 {
			return false
		}
		seen |= 1 << idx
		if s.byte(',') {
			continue
		}
		return s.byte('}')
	}
}

// end reports whether only white space is left.
func (s *scanner) end() bool {
	s.space()
	return s.i == len(s.b)
}

func fastRequest(data []byte, r *Request) bool {
	s := &scanner{b: data}
	ok := s.object(func(name []byte) (int, bool) {
		var ok bool
		switch string(name) {
		case "id":
			r.ID, ok = s.text()
			return 0, ok
		case "commandType":
			r.CommandType, ok = s.smallInt()
			return 1, ok
		case "key":
			r.Key, ok = s.text()
			return 2, ok
		case "clientId":
			r.ClientID, ok = s.text()
			return 3, ok
		case "ttl":
			r.TTL, ok = s.int(18)
			return 4, ok
		case "value":
			var v string
			v, ok = s.text()
			r.Value = &v
			return 5, ok
		case "lockToken":
			r.LockToken, ok = s.text()
			return 6, ok
		case "fencingToken":
			r.FencingToken, ok = s.fencingToken()
			return 7, ok
		case "ack":
			r.Ack, ok = s.bool()
			return 8, ok
		case "releaseOnDisconnect":
			r.ReleaseOnDisconnect, ok = s.bool()
			return 9, ok
		case "target":
			r.Target, ok = s.text()
			return 10, ok
		case "waitMs":
			r.WaitMS, ok = s.int(18)
			return 11, ok
		case "mode":
			r.Mode, ok = s.text()
			return 12, ok
		case "permits":
			r.Permits, ok = s.smallInt()
			return 13, ok
		case "lockDelayMs":
			r.LockDelayMS, ok = s.int(18)
			return 14, ok
		case "keys":
			r.Keys, ok = s.strings()
			return 15, ok
		case "sessionId":
			r.SessionID, ok = s.text()
			return 16, ok
		case "prefix":
			r.Prefix, ok = s.bool()
			return 17, ok
		}
		return 0, false
	})
	return ok && s.end()
}

// strings reads an array of plain strings (as str reads them); [] gives an
// empty, non-nil slice, as encoding/json does.
func (s *scanner) strings() ([]string, bool) {
	if !s.byte('[') {
		return nil, false
	}
	out := []string{}
	if s.byte(']') {
		return out, true
	}
	for {
		str, ok := s.text()
		if !ok {
			return nil, false
		}
		out = append(out, str)
		if s.byte(',') {
			continue
		}
		return out, s.byte(']')
	}
}

func fastReply(data []byte, r *Reply) bool {
	s := &scanner{b: data}
	ok := s.object(func(name []byte) (int, bool) {
		var ok bool
		switch string(name) {
		case "id":
			r.ID, ok = s.text()
			return 0, ok
		case "type":
			r.Type, ok = s.text()
			return 1, ok
		case "success":
			r.Success, ok = s.bool()
			return 2, ok
		case "key":
			r.Key, ok = s.text()
			return 3, ok
		case "fencingToken":
			r.FencingToken, ok = s.fencingToken()
			return 4, ok
		case "lockToken":
			r.LockToken, ok = s.text()
			return 5, ok
		case "ttl":
			r.TTL, ok = s.int(18)
			return 6, ok
		case "owner":
			r.Owner, ok = s.text()
			return 7, ok
		case "value":
			var v string
			v, ok = s.text()
			r.Value = &v
			return 8, ok
		case "expiresIn":
			var v int64
			v, ok = s.int(18)
			r.ExpiresIn = &v
			return 9, ok
		case "waiters":
			var n int
			n, ok = s.smallInt()
			r.Waiters = &n
			return 10, ok
		case "wanted":
			r.Wanted, ok = s.bool()
			return 11, ok
		case "mode":
			r.Mode, ok = s.text()
			return 12, ok
		case "permits":
			r.Permits, ok = s.smallInt()
			return 13, ok
		case "event":
			r.Event, ok = s.text()
			return 14, ok
		case "revision":
			r.Revision, ok = s.uint()
			return 15, ok
		case "sessionId":
			r.SessionID, ok = s.text()
			return 16, ok
		}
		return 0, false // "error", "holders" and "leases" among them: left to encoding/json
	})
	return ok && s.end()
}

// fencingToken reads {"key": "...", "value": n} (either order, both
// optional) or a bare n, as FencingToken.UnmarshalJSON reads them.
func (s *scanner) fencingToken() (*FencingToken, bool) {
	t := &FencingToken{}
	s.space()
	if s.i < len(s.b) && s.b[s.i] != '{' {
		v, ok := s.uint()
		t.Value = v
		return t, ok
	}
	ok := s.object(func(name []byte) (int, bool) {
		var ok bool
		switch string(name) {
		case "key":
			t.Key, ok = s.text()
			return 0, ok
		case "value":
			t.Value, ok = s.uint()
			return 1, ok
		}
		return 0, false
	})
	return t, ok
}
