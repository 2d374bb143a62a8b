package spec

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// The primitives beyond the mutex against the spec: every new message and error a
// target can produce, and unsupported for each primitive it does not
// announce. Keys are prefixed by the target so that targets sharing a
// backend do not meet.

// announced reads the features a gateway announces on its upgrade.
func announced(resp *http.Response) lock.Features {
	f, _ := lock.ParseFeatures(strings.Split(resp.Header.Get("Lockgate-Features"), ","))
	return f
}

func testPrimitivesWS(t *testing.T, s *spec, n *node, base string) {
	a, resp := dial(t, s, "PA", base, nil)
	f := announced(resp)
	b, _ := dial(t, s, "PB", base, nil)
	t.Logf("%s announces %v", base, f)
	unsupported := func(w *wsc, id, frame string) {
		t.Helper()
		w.send(frame, reqValid)
		w.reply(id, "error", "unsupported")
	}

	// Shared locks: two readers, inspect's holders, a writer held out.
	if f.Has(lock.FeatureShared) {
		a.send(`{"id":"s1","commandType":5,"key":"p/rw","mode":"shared","ttl":60000,"clientId":"r1"}`, reqValid)
		if m := a.reply("s1", "grant", ""); m["mode"] != "shared" {
			t.Errorf("a shared grant without mode shared: %v", m)
		}
		b.send(`{"id":"s2","commandType":5,"key":"p/rw","mode":"shared","ttl":60000,"clientId":"r2"}`, reqValid)
		b.reply("s2", "grant", "")
		b.send(`{"id":"s3","commandType":4,"key":"p/rw"}`, reqValid)
		if hs, _ := b.reply("s3", "info", "")["holders"].([]any); len(hs) != 2 {
			t.Errorf("inspect of a key with two readers lists holders %v", hs)
		}
		b.send(`{"id":"s4","commandType":5,"key":"p/rw","mode":"exclusive"}`, reqValid)
		b.reply("s4", "error", "held")
	} else {
		unsupported(a, "s1", `{"id":"s1","commandType":5,"key":"p/rw","mode":"shared"}`)
	}

	// Semaphores.
	if f.Has(lock.FeatureSemaphore) {
		a.send(`{"id":"m1","commandType":5,"key":"p/sem","permits":2,"ttl":60000}`, reqValid)
		if m := a.reply("m1", "grant", ""); m["permits"] != float64(2) {
			t.Errorf("a permit's grant without permits 2: %v", m)
		}
		b.send(`{"id":"m2","commandType":5,"key":"p/sem","permits":3}`, reqValid)
		b.reply("m2", "error", "permits_mismatch")
	} else {
		unsupported(a, "m1", `{"id":"m1","commandType":5,"key":"p/sem","permits":2}`)
	}

	// Lock-delay: free, but not grantable yet.
	if f.Has(lock.FeatureLockDelay) {
		a.send(`{"id":"d1","commandType":5,"key":"p/ld","ttl":20,"lockDelayMs":60000}`, reqValid)
		a.reply("d1", "grant", "")
		for i := 0; ; i++ {
			id := fmt.Sprintf("d2-%d", i)
			b.send(`{"id":"`+id+`","commandType":4,"key":"p/ld"}`, reqValid)
			if m := b.next(id, func(m map[string]any) bool { return m["id"] == id }); m["type"] == "error" {
				break
			}
			if i == 2000 {
				t.Fatalf("a 20 ms lease never expired")
			}
			time.Sleep(time.Millisecond)
		}
		b.send(`{"id":"d3","commandType":5,"key":"p/ld"}`, reqValid)
		if e, _ := b.reply("d3", "error", "delayed")["error"].(map[string]any); e["retryIn"] == nil {
			t.Errorf("delayed without retryIn: %v", e)
		}
	} else {
		unsupported(a, "d1", `{"id":"d1","commandType":5,"key":"p/ld","lockDelayMs":1000}`)
	}

	// acquireAll and tryAcquireAll.
	if f.Has(lock.FeatureMultiKey) {
		a.send(`{"id":"k1","commandType":8,"keys":["p/x","p/y"],"ttl":60000}`, reqValid)
		if ls, _ := a.reply("k1", "grants", "")["leases"].([]any); len(ls) != 2 {
			t.Errorf("grants of two keys lists %v", ls)
		}
		b.send(`{"id":"k2","commandType":8,"keys":["p/z","p/y"]}`, reqValid)
		b.reply("k2", "error", "held")
		b.send(`{"id":"k3","commandType":7,"keys":["p/z","p/y"],"waitMs":50}`, reqValid)
		b.reply("k3", "error", "timeout")
		b.send(`{"id":"k4","commandType":7,"keys":["p/z","p/x"]}`, reqValid)
		b.send(`{"id":"k5","commandType":6,"target":"k4"}`, reqValid)
		b.reply("k5", "cancelled", "")
		b.reply("k4", "error", "cancelled")
	} else {
		unsupported(a, "k1", `{"id":"k1","commandType":8,"keys":["p/x","p/y"]}`)
	}

	// Watches: holder, synced, released, granted; unwatch; ids; the limit.
	if f.Has(lock.FeatureWatch) {
		a.send(`{"id":"w0","commandType":5,"key":"p/w","ttl":60000,"value":"v"}`, reqValid)
		lt, ft, _ := leaseOf(t, a.reply("w0", "grant", ""))
		b.send(`{"id":"W","commandType":9,"key":"p/w"}`, reqValid)
		for _, ev := range []string{"holder", "synced"} {
			if m := b.reply("W", "event", ""); m["event"] != ev {
				t.Errorf("watch event %v, want %s", m, ev)
			}
		}
		a.send(fmt.Sprintf(`{"id":"w1","commandType":2,"key":"p/w","lockToken":%q,"fencingToken":%s,"ack":true}`, lt, ft), reqValid)
		a.reply("w1", "released", "")
		if m := b.reply("W", "event", ""); m["event"] != "released" {
			t.Errorf("watch event %v, want released", m)
		}
		a.send(`{"id":"w2","commandType":5,"key":"p/w","ttl":60000}`, reqValid)
		a.reply("w2", "grant", "")
		if m := b.reply("W", "event", ""); m["event"] != "granted" {
			t.Errorf("watch event %v, want granted", m)
		}
		b.send(`{"id":"W","commandType":9,"key":"p/w2"}`, reqValid)
		b.reply("W", "error", "duplicate_id")
		b.send(`{"id":"w3","commandType":10,"target":"W"}`, reqValid)
		b.reply("w3", "unwatched", "")
		b.send(`{"id":"w4","commandType":10,"target":"W"}`, reqValid)
		b.reply("w4", "error", "not_found")
	} else {
		unsupported(b, "W", `{"id":"W","commandType":9,"key":"p/w"}`)
	}
	// Prefix watches: synced, then the events of the keys under the prefix
	// only, each with its own key; the prefix "" (every key); unwatch.
	if f.Has(lock.FeatureWatchPrefix) {
		b.send(`{"id":"P","commandType":9,"key":"p/pw/","prefix":true}`, reqValid)
		if m := b.reply("P", "event", ""); m["event"] != "synced" || m["key"] != "p/pw/" {
			t.Errorf("first event of a prefix watch %v, want synced of the prefix", m)
		}
		b.send(`{"id":"PA","commandType":9,"prefix":true}`, reqValid)
		if m := b.reply("PA", "event", ""); m["event"] != "synced" || m["key"] != nil {
			t.Errorf("first event of the watch of every key %v, want synced without key", m)
		}
		a.send(`{"id":"pw1","commandType":5,"key":"p/pw/a","ttl":60000}`, reqValid)
		lt, ft, _ := leaseOf(t, a.reply("pw1", "grant", ""))
		a.send(`{"id":"pw2","commandType":5,"key":"p/pwx","ttl":60000}`, reqValid)
		a.reply("pw2", "grant", "")
		a.send(fmt.Sprintf(`{"id":"pw3","commandType":2,"key":"p/pw/a","lockToken":%q,"fencingToken":%s,"ack":true}`, lt, ft), reqValid)
		a.reply("pw3", "released", "")
		for _, want := range []string{"granted", "released"} { // not p/pwx's grant
			m := b.reply("P", "event", "")
			tok, _ := m["fencingToken"].(map[string]any)
			if m["event"] != want || m["key"] != "p/pw/a" || tok["key"] != "p/pw/a" {
				t.Errorf("prefix watch event %v, want %s of p/pw/a", m, want)
			}
		}
		for _, want := range []string{"p/pw/a", "p/pwx", "p/pw/a"} {
			if m := b.reply("PA", "event", ""); m["key"] != want {
				t.Errorf("watch of every key: event %v, want one of %s", m, want)
			}
		}
		b.send(`{"id":"P1","commandType":10,"target":"P"}`, reqValid)
		if m := b.reply("P1", "unwatched", ""); m["key"] != "p/pw/" {
			t.Errorf("unwatched %v, want the prefix as key", m)
		}
		b.send(`{"id":"P2","commandType":10,"target":"PA"}`, reqValid)
		b.reply("P2", "unwatched", "")
	} else {
		b.send(`{"id":"P","commandType":9,"key":"","prefix":true}`, reqValid)
		want := "watchprefix"
		if !f.Has(lock.FeatureWatch) {
			want = "watch"
		}
		if e, _ := b.reply("P", "error", "unsupported")["error"].(map[string]any); e["feature"] != want {
			t.Errorf("unsupported prefix watch names feature %v, want %s", e["feature"], want)
		}
	}
	if base == n.mem {
		l, _ := dial(t, s, "PL", n.memLimited, nil)
		l.send(`{"id":"L1","commandType":9,"key":"p/l"}`, reqValid)
		l.reply("L1", "event", "")
		l.send(`{"id":"L2","commandType":9,"key":"p/l"}`, reqValid)
		l.reply("L2", "error", "too_many_watches")
	}

	// Malformed input, whatever the backend offers: refused before
	// unsupported.
	for _, c := range []struct {
		frame, id, code string
	}{
		{`{"id":"x1","commandType":5,"key":"p/e","mode":"read"}`, "x1", "invalid_mode"},
		{`{"id":"x2","commandType":5,"key":"p/e","permits":-1}`, "x2", "invalid_permits"},
		{`{"id":"x3","commandType":5,"key":"p/e","permits":65537}`, "x3", "invalid_permits"},
		{`{"id":"x4","commandType":1,"key":"p/e","lockDelayMs":60001}`, "x4", "invalid_lock_delay"},
		{`{"id":"x5","commandType":8,"keys":[]}`, "x5", "invalid_keys"},
		{`{"id":"x6","commandType":8,"keys":["a","a"]}`, "x6", "invalid_keys"},
		{`{"id":"x7","commandType":7}`, "x7", "missing_field"},
		{`{"id":"x8","commandType":5,"key":"p/e","keys":["a"]}`, "x8", "bad_json"},
		{`{"id":"x9","commandType":8,"key":"p/e","keys":["a"]}`, "x9", "bad_json"},
		{`{"commandType":9,"key":"p/e"}`, "", "missing_field"},
		{`{"id":"y1","commandType":10}`, "y1", "missing_field"},
		{`{"id":"y2","commandType":9}`, "y2", "missing_field"},
		{`{"id":"y4","commandType":9,"key":"","prefix":false}`, "y4", "invalid_key"},
		{`{"id":"y5","commandType":9,"key":"a\u0001","prefix":true}`, "y5", "invalid_key"},
		{`{"id":"y6","commandType":4,"key":"p/e","prefix":true}`, "y6", "bad_json"},
		{`{"id":"y7","commandType":9,"key":"p/e","prefix":1}`, "y7", "bad_json"},
	} {
		a.send(c.frame, reqInvalid)
		a.reply(c.id, "error", c.code)
	}
	// Not a schema's business: the target names no watch.
	a.send(`{"id":"y3","commandType":10,"target":"none"}`, reqValid)
	a.reply("y3", "error", "not_found")
}

func testPrimitivesREST(t *testing.T, s *spec, n *node, base string) {
	_, resp := dial(t, s, "features", base, nil)
	f := announced(resp)
	r := &restClient{t: t, s: s, n: n, client: &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	post := func(name, key, body string, req, status int, code string) map[string]any {
		t.Helper()
		return r.do(name, call{base: base, method: "POST", path: "/locks/{key}", key: key, body: body, req: req, status: status, code: code})
	}
	all := func(name, body string, req, status int, code string) map[string]any {
		t.Helper()
		return r.do(name, call{base: base, method: "POST", path: "/locks", body: body, req: req, status: status, code: code})
	}
	if f.Has(lock.FeatureShared) {
		post("shared 1", "q/rw", `{"mode":"shared","ttl_ms":60000}`, reqValid, 200, "")
		post("shared 2", "q/rw", `{"mode":"shared","ttl_ms":60000}`, reqValid, 200, "")
		m := r.do("inspect shared", call{base: base, method: "GET", path: "/locks/{key}", key: "q/rw", status: 200})
		if hs, _ := m["holders"].([]any); len(hs) != 2 || m["mode"] != "shared" {
			t.Errorf("inspect of two readers: %v", m)
		}
	} else {
		post("shared", "q/rw", `{"mode":"shared"}`, reqValid, 501, "unsupported")
	}
	if f.Has(lock.FeatureSemaphore) {
		post("permit", "q/sem", `{"permits":2,"ttl_ms":60000}`, reqValid, 200, "")
		post("another N", "q/sem", `{"permits":3}`, reqValid, 409, "permits_mismatch")
	} else {
		post("permit", "q/sem", `{"permits":2}`, reqValid, 501, "unsupported")
	}
	if f.Has(lock.FeatureLockDelay) {
		post("lock-delay lease", "q/ld", `{"ttl_ms":20,"lock_delay_ms":60000}`, reqValid, 200, "")
		for i := 0; ; i++ {
			req, _ := http.NewRequest("GET", base+"/locks/q%2Fld", nil)
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode == 404 {
				break
			}
			if i == 2000 {
				t.Fatalf("a 20 ms lease never expired")
			}
			time.Sleep(time.Millisecond)
		}
		post("in the lock-delay", "q/ld", `{}`, reqValid, 409, "delayed")
	} else {
		post("lock-delay", "q/ld", `{"lock_delay_ms":10}`, reqValid, 501, "unsupported")
	}
	if f.Has(lock.FeatureMultiKey) {
		all("acquireAll", `{"keys":["q/a","q/b"],"ttl_ms":60000}`, reqValid, 200, "")
		all("acquireAll of a held key", `{"keys":["q/c","q/b"]}`, reqValid, 409, "held")
		// A wait past the synchronous window: a ticket whose poll answers
		// the leases.
		g := post("hold q/d", "q/d", `{"ttl_ms":60000}`, reqValid, 200, "")
		tk := all("acquireAll that waits", `{"keys":["q/c","q/d"],"wait_ms":60000}`, reqValid, 202, "")
		lt, _, ft := ftOf(t, g)
		rel := fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, lt, ft)
		r.do("release q/d", call{base: base, method: "DELETE", path: "/locks/{key}", key: "q/d", body: rel, req: reqValid, status: 204})
		id, _ := tk["ticket"].(string)
		for i := 0; ; i++ {
			m := r.do("poll", call{base: base, method: "GET", path: "/tickets/{ticket}", ticket: id, status: 200, waiting: true})
			if r.last == 200 {
				if ls, _ := m["leases"].([]any); len(ls) != 2 {
					t.Errorf("the ticket's leases: %v", m)
				}
				break
			}
			if i == 2000 {
				t.Fatalf("the ticket never finished")
			}
			time.Sleep(time.Millisecond)
		}
	} else {
		all("acquireAll", `{"keys":["q/a","q/b"]}`, reqValid, 501, "unsupported")
	}
	post("invalid mode", "q/e", `{"mode":"read"}`, reqInvalid, 400, "invalid_mode")
	post("invalid permits", "q/e", `{"permits":-1}`, reqInvalid, 400, "invalid_permits")
	post("invalid lock-delay", "q/e", `{"lock_delay_ms":60001}`, reqInvalid, 400, "invalid_lock_delay")
	post("camelCase field", "q/e", `{"lockDelayMs":5}`, reqInvalid, 400, "bad_json")
	all("no keys", `{"keys":[]}`, reqInvalid, 400, "invalid_keys")
	all("a key twice", `{"keys":["a","a"]}`, reqInvalid, 400, "invalid_keys")
	all("keys missing", `{"ttl_ms":1000}`, reqInvalid, 400, "missing_field")
	all("invalid wait", `{"keys":["a"],"wait_ms":-1}`, reqInvalid, 400, "invalid_wait")
	r.raw("GET /locks", "GET", base+"/locks", 405, "MethodNotAllowed")
}
