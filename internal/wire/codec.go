package wire

import (
	"encoding/json"
	"strconv"
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
	b = appendStringField(b, `,"traceparent":`, r.Traceparent)
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
