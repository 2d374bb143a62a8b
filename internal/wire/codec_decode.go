package wire

import (
	"bytes"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
)

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
		case "traceparent":
			r.Traceparent, ok = s.text()
			return 18, ok
		}
		return 0, false
	})
	return ok && s.end()
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
