package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strconv"
	"testing"
)

var requestSeeds = []string{
	`{"id":"1","commandType":1,"key":"k","ttl":1000}`,
	`{"id":"2","commandType":2,"key":"k","lockToken":"ab","fencingToken":{"key":"k","value":1},"ack":true}`,
	`{"id":"3","commandType":3,"key":"k","lockToken":"ab","fencingToken":{"value":18,"key":"k"},"ttl":5}`,
	`{"id":"4","commandType":4,"key":"k"}`,
	`{"id":"5","commandType":5,"key":"k","value":"v","clientId":"c","releaseOnDisconnect":true}`,
	`{"id":"6","commandType":6,"target":"1"}`,
	` { "id" : "7" , "commandType" : 2 , "fencingToken" : 9 } `,
	`{"id":"8","commandType":2,"fencingToken":"9"}`,
	`{"id":"9","commandType":1,"KEY":"k"}`,
	`{"id":"10","commandType":1,"key":"k","key":"j"}`,
	`{"id":"11","commandType":1,"key":"k\u00e9","other":[1,2]}`,
	`{"id":"12","commandType":1.0}`, `{"commandType":1e3}`, `{"ttl":-0}`, `{"ttl":01}`,
	`{"ttl":-9223372036854775808,"commandType":5,"key":"k"}`, `{"ttl":99999999999999999999}`,
	`{"fencingToken":{"value":-1}}`, `{"fencingToken":{"value":18446744073709551615}}`,
	`{"fencingToken":null}`, `{"value":null}`, `{"ack":tru}`, `{"ack":true,}`, `{}`, `{`, `[]`, `null`, ``,
	`{"id":"<&>"}`, "{\"id\":\"a\x7fb\"}", `{"key":"a\"b"}`, `{"id":"1"} x`,
	`{"id":"13","commandType":1,"key":"k","mode":"shared","permits":3,"lockDelayMs":500}`,
	`{"id":"14","commandType":7,"keys":["a","b"],"ttl":1000}`, `{"keys":[]}`, `{"keys":[ "a" , "b" ]}`,
	`{"keys":["a",]}`, `{"keys":["a"}`, `{"keys":null}`, `{"keys":[1]}`, `{"keys":["\u00e9"]}`, `{"permits":-3}`,
	`{"id":"15","commandType":9,"key":"k"}`, `{"id":"16","commandType":10,"target":"15"}`,
	`{"id":"17","commandType":9,"key":"","prefix":true}`, `{"id":"18","commandType":9,"key":"a/","prefix":false}`,
	`{"prefix":"true"}`, `{"prefix":null}`, `{"prefix":1}`, `{"prefix":true,"prefix":false}`, `{"Prefix":true}`,
	`{"id":"19","commandType":1,"key":"k","traceparent":"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}`,
	`{"traceparent":""}`, `{"traceparent":null}`, `{"traceparent":1}`, `{"traceparent":"a","traceparent":"b"}`, `{"TraceParent":"x"}`,
}

var replySeeds = []string{
	`{"id":"1","type":"grant","success":true,"key":"k","fencingToken":{"key":"k","value":7},"lockToken":"ab","ttl":30000,"owner":"o"}`,
	`{"id":"2","type":"released","success":true,"key":"k"}`,
	`{"id":"3","type":"info","success":true,"key":"k","owner":"o","fencingToken":{"key":"k","value":7},"value":"v","expiresIn":12,"waiters":0}`,
	`{"id":"4","type":"error","success":false,"error":{"code":"held","message":"m","holder":{"owner":"o","fencingToken":5,"expiresIn":1000}}}`,
	`{"type":"queued","success":true}`,
	`{"id":"5","type":"grant","success":true,"ttl":-5,"waiters":-1}`,
	`{"id":"6","type":"grant","Success":true}`,
	`{"id":"7","type":"event","success":true,"key":"k","event":"granted","owner":"o","fencingToken":{"key":"k","value":9},"mode":"shared","permits":2,"revision":44}`,
	`{"id":"8","type":"grants","success":true,"leases":[{"key":"a","fencingToken":{"key":"a","value":1},"lockToken":"ab","ttl":5}]}`,
	`{"id":"9","type":"info","success":true,"key":"k","mode":"shared","holders":[{"owner":"o","fencingToken":{"key":"k","value":1},"expiresIn":5}]}`,
	`{"id":"10","type":"event","success":false,"key":"k","event":"error","error":{"code":"watch_overflow","message":"m"}}`,
}

// FuzzDecodeRequest: DecodeRequest gives what json.Unmarshal gives, value
// and error alike.
func FuzzDecodeRequest(f *testing.F) {
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got Request
		werr := json.Unmarshal(data, &want)
		gerr := DecodeRequest(data, &got)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Fatalf("%q: error %v, encoding/json's %v", data, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
		}
	})
}

// FuzzDecodeReply: DecodeReply gives what json.Unmarshal gives.
func FuzzDecodeReply(f *testing.F) {
	for _, s := range replySeeds {
		f.Add([]byte(s))
	}
	for _, s := range requestSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var want, got Reply
		werr := json.Unmarshal(data, &want)
		gerr := DecodeReply(data, &got)
		if (werr == nil) != (gerr == nil) || werr != nil && werr.Error() != gerr.Error() {
			t.Fatalf("%q: error %v, encoding/json's %v", data, gerr, werr)
		}
		if werr == nil && !reflect.DeepEqual(got, want) {
			t.Fatalf("%q: decoded %+v, encoding/json %+v", data, got, want)
		}
	})
}

// FuzzAppendJSON: AppendJSON writes what json.Marshal writes, for requests
// and replies with any field values.
func FuzzAppendJSON(f *testing.F) {
	f.Add("1", 1, "k", "c", int64(1000), "v", "ab", uint64(7), true, false, "t", "grant", "o", int64(5), -1, false)
	f.Add("", 0, "", "", int64(0), "", "", uint64(0), false, false, "", "", "", int64(0), 0, true)
	f.Add("<é>", -3, "a\"b\\c\n\u2028", "\xff", int64(-1), "\x00", "&", uint64(1<<64-1), false, true, "\u007f", "x", "y", int64(1<<62), 1<<30, true)
	f.Fuzz(func(t *testing.T, id string, cmd int, key, client string, ttl int64, value, handle string, token uint64,
		ack, rod bool, target, typ, owner string, n int64, waiters int, withErr bool) {
		reqs := []Request{
			{ID: id, CommandType: cmd, Key: key, ClientID: client, TTL: ttl, Value: &value, LockToken: handle,
				FencingToken: &FencingToken{Key: key, Value: token}, Ack: ack, ReleaseOnDisconnect: rod, Target: target},
			{ID: id, CommandType: cmd, Key: key, TTL: ttl, LockToken: handle, Prefix: rod, Traceparent: target},
		}
		for _, r := range reqs {
			want, _ := json.Marshal(&r)
			if got := r.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("request %+v:\n got %s\nwant %s", r, got, want)
			}
		}
		reps := []Reply{
			{ID: id, Type: typ, Success: ack, Key: key, FencingToken: &FencingToken{Key: key, Value: token},
				LockToken: handle, TTL: ttl, Owner: owner, Value: &value, ExpiresIn: &n, Waiters: &waiters},
			{ID: id, Type: typ, Success: rod, Key: key},
		}
		if withErr {
			reps = append(reps, Reply{ID: id, Type: "error", Error: &Error{Code: typ, Message: value,
				Leader: &Leader{ID: owner, Addr: target}, Holder: &Holder{Owner: owner, FencingToken: &FencingToken{Key: key, Value: token}, ExpiresIn: n}}})
		}
		for _, r := range reps {
			want, _ := json.Marshal(&r)
			if got := r.AppendJSON(nil); !bytes.Equal(got, want) {
				t.Fatalf("reply %+v:\n got %s\nwant %s", r, got, want)
			}
			// And what one side writes, the other reads as encoding/json would.
			var back, wantBack Reply
			json.Unmarshal(want, &wantBack)
			if err := DecodeReply(want, &back); err != nil || !reflect.DeepEqual(back, wantBack) {
				t.Fatalf("reply %s decoded as %+v, %v; want %+v", want, back, err, wantBack)
			}
		}
	})
}

// TestFastPathTaken: the messages the SDK and the gateway exchange in an
// acquire + release cycle decode without encoding/json (the point of the
// fast decoders), and the fallback handles the rest.
func TestFastPathTaken(t *testing.T) {
	v := "v"
	for _, r := range []Request{
		{ID: "1z", CommandType: CmdAcquire, Key: "orders/42", ClientID: "sdk-0123456789ab", TTL: 30000, LockToken: "0123456789abcdef0123456789abcdef", Value: &v},
		{ID: "2", CommandType: CmdRelease, Key: "orders/42", LockToken: "0123456789abcdef0123456789abcdef", FencingToken: &FencingToken{Key: "orders/42", Value: 123}, Ack: true},
		{ID: "w", CommandType: CmdWatch, Prefix: true}, // the console's watch of every key
		{ID: "3", CommandType: CmdAcquire, Key: "k", Traceparent: "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"},
	} {
		var got Request
		if !fastRequest(r.AppendJSON(nil), &got) || !reflect.DeepEqual(got, r) {
			t.Errorf("request %+v: fast path not taken or %+v", r, got)
		}
	}
	for _, r := range []Reply{
		{ID: "1z", Type: TypeGrant, Success: true, Key: "orders/42", FencingToken: &FencingToken{Key: "orders/42", Value: 123}, LockToken: "0123456789abcdef0123456789abcdef", TTL: 30000, Owner: "sdk-0123456789ab"},
		{ID: "2", Type: TypeReleased, Success: true, Key: "orders/42"},
	} {
		var got Reply
		if !fastReply(append(r.AppendJSON(nil), '\n'), &got) || !reflect.DeepEqual(got, r) {
			t.Errorf("reply %+v: fast path not taken or %+v", r, got)
		}
	}
	var r Request
	if fastRequest([]byte(`{"ID":"1"}`), &r) {
		t.Error("a field spelled in another case took the fast path")
	}
	if err := DecodeRequest([]byte(`{"ID":"1"}`), &r); err != nil || r.ID != "1" {
		t.Errorf("fallback: %+v, %v", r, err)
	}
}

func BenchmarkDecodeRequest(b *testing.B) {
	data := []byte(`{"id":"2","commandType":2,"key":"orders/42","lockToken":"0123456789abcdef0123456789abcdef","fencingToken":{"key":"orders/42","value":123},"ack":true}`)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			var r Request
			DecodeRequest(data, &r)
		}
	})
	b.Run("encoding-json", func(b *testing.B) {
		for b.Loop() {
			var r Request
			json.Unmarshal(data, &r)
		}
	})
}

// filled returns a value of type t with every field set to a non-zero
// value the fast decoders accept (plain ASCII strings, small integers,
// true), following pointers and nested structs: a message that uses every
// field of the protocol at once.
func filled(t reflect.Type, seed *int) reflect.Value {
	*seed++
	v := reflect.New(t).Elem()
	switch t.Kind() {
	case reflect.String:
		v.SetString("s" + strconv.Itoa(*seed))
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*seed))
	case reflect.Uint64:
		v.SetUint(uint64(*seed))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Pointer:
		p := reflect.New(t.Elem())
		p.Elem().Set(filled(t.Elem(), seed))
		v.Set(p)
	case reflect.Slice:
		v.Set(reflect.Append(reflect.MakeSlice(t, 0, 1), filled(t.Elem(), seed)))
	case reflect.Struct:
		for i := 0; i < t.NumField(); i++ {
			v.Field(i).Set(filled(t.Field(i).Type, seed))
		}
	default:
		panic("filled: a field of kind " + t.Kind().String() + ": teach filled and the codec about it")
	}
	return v
}

// TestCodecCoversEveryField: a Request and a Reply with every field set
// encode as json.Marshal encodes them and decode, on the fast path, back to
// themselves. A field added to the structs but not to AppendJSON, or not to
// the fast decoder (which would then send every message using it to
// encoding/json), fails here: the fuzz targets only cover the fields they
// are told about.
func TestCodecCoversEveryField(t *testing.T) {
	seed := 0
	req := filled(reflect.TypeFor[Request](), &seed).Interface().(Request)
	want, _ := json.Marshal(&req)
	if got := req.AppendJSON(nil); !bytes.Equal(got, want) {
		t.Errorf("Request.AppendJSON of every field:\n got %s\nwant %s", got, want)
	}
	var back Request
	if !fastRequest(want, &back) || !reflect.DeepEqual(back, req) {
		t.Errorf("fastRequest(%s): fast path not taken or decoded %+v; want %+v", want, back, req)
	}

	rep := filled(reflect.TypeFor[Reply](), &seed).Interface().(Reply)
	want, _ = json.Marshal(&rep)
	if got := rep.AppendJSON(nil); !bytes.Equal(got, want) {
		t.Errorf("Reply.AppendJSON of every field:\n got %s\nwant %s", got, want)
	}
	var backRep Reply
	if err := DecodeReply(want, &backRep); err != nil || !reflect.DeepEqual(backRep, rep) {
		t.Errorf("DecodeReply(%s) = %+v, %v; want %+v", want, backRep, err, rep)
	}
	// Error replies, an info's holders and a grants' leases are left to
	// encoding/json on purpose (rare, nested); every other field has a
	// fast path.
	rep.Error, rep.Holders, rep.Leases = nil, nil, nil
	want = rep.AppendJSON(nil)
	if wantStd, _ := json.Marshal(&rep); !bytes.Equal(want, wantStd) {
		t.Errorf("Reply.AppendJSON of every field but error:\n got %s\nwant %s", want, wantStd)
	}
	backRep = Reply{}
	if !fastReply(want, &backRep) || !reflect.DeepEqual(backRep, rep) {
		t.Errorf("fastReply(%s): fast path not taken or decoded %+v; want %+v", want, backRep, rep)
	}
}

// TestCheckFieldsEmbedded: CheckFields takes the fields of an embedded
// struct without a JSON name as the struct's own, as encoding/json does,
// and still refuses an unknown field or one in another case.
func TestCheckFieldsEmbedded(t *testing.T) {
	type inner struct {
		TTLMS int64 `json:"ttl_ms"`
	}
	type outer struct {
		Keys []string `json:"keys"`
		inner
	}
	for data, want := range map[string]string{
		`{"keys":["a"],"ttl_ms":5}`: "",
		`{"ttl_ms":5}`:              "",
		`{"TTL_MS":5}`:              "TTL_MS",
		`{"inner":{}}`:              "inner",
		`{"keys":[],"other":1}`:     "other",
	} {
		err := CheckFields([]byte(data), &outer{})
		var uf *UnknownFieldError
		switch {
		case want == "" && err != nil:
			t.Errorf("CheckFields(%s) = %v; want nil", data, err)
		case want != "" && (!errors.As(err, &uf) || uf.Name != want):
			t.Errorf("CheckFields(%s) = %v; want unknown field %q", data, err, want)
		}
	}
}

// TestTraceparentOptional: the trace context field is optional both ways.
// A frame without it (what older clients send) decodes exactly as before,
// strict or not, to a request with no trace context; one with it decodes
// to the same request plus the field; and a request without it encodes
// byte for byte as before.
func TestTraceparentOptional(t *testing.T) {
	const tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
	old := `{"id":"1","commandType":1,"key":"k","clientId":"c","ttl":1000,"lockToken":"ab","waitMs":50}`
	want := Request{ID: "1", CommandType: CmdAcquire, Key: "k", ClientID: "c", TTL: 1000, LockToken: "ab", WaitMS: 50}
	for _, decode := range []func([]byte, *Request) error{DecodeRequest, DecodeRequestStrict} {
		var got Request
		if err := decode([]byte(old), &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("old-format frame: %+v, %v; want %+v", got, err, want)
		}
		var with Request
		traced := old[:len(old)-1] + `,"traceparent":"` + tp + `"}`
		if err := decode([]byte(traced), &with); err != nil || with.Traceparent != tp {
			t.Fatalf("frame with traceparent: %+v, %v", with, err)
		}
		with.Traceparent = ""
		if !reflect.DeepEqual(with, want) {
			t.Fatalf("traceparent changed other fields: %+v", with)
		}
	}
	if got := string(want.AppendJSON(nil)); got != old {
		t.Fatalf("a request without trace context encodes as %s, want %s", got, old)
	}
}
