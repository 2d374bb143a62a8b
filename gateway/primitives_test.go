package gateway

import (
	"context"
	"fmt"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// The primitives beyond the mutex through the gateway, over the reference locker
// (which offers every feature, or the subset a test asks for).

// startOver serves a gateway over l.
func startOver(t testing.TB, l lock.Locker, opts Options) (*Gateway, *httptest.Server) {
	t.Helper()
	g := New(l, opts)
	srv := httptest.NewServer(g)
	t.Cleanup(func() { g.Close(); srv.Close() })
	return g, srv
}

// hidden is a Locker that reports no features and offers neither
// AcquireAll nor Watch, over one that offers them all: a request the
// gateway let through would be granted, so an unsupported answer proves
// the gateway refused it. calls counts what reached the Locker.
type hidden struct {
	lock.Locker
	calls atomic.Int64
}

func (h *hidden) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	h.calls.Add(1)
	return h.Locker.Acquire(ctx, key, opts)
}

func (h *hidden) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	h.calls.Add(1)
	return h.Locker.TryAcquire(ctx, key, opts)
}

// TestFeaturesAnnounced: the upgrade's Lockgate-Features lists wanted and
// the backend's features, then traceparent (every gateway reads a
// request's trace context); REST answers carry the same list; a backend
// with fewer features announces fewer.
func TestFeaturesAnnounced(t *testing.T) {
	for _, tc := range []struct {
		name string
		l    lock.Locker
		want string
	}{
		{"all", locktest.NewMemStore().NewLocker(), "wanted,shared,semaphore,multikey,watch,lockdelay,traceparent"},
		{"shared-watch", locktest.NewMemStoreWithFeatures(lock.FeatureShared | lock.FeatureWatch).NewLocker(), "wanted,shared,watch,traceparent"},
		{"hidden", &hidden{Locker: locktest.NewMemStore().NewLocker()}, "traceparent"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := startOver(t, tc.l, Options{})
			ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", nil)
			if err != nil {
				t.Fatal(err)
			}
			ws.Close()
			if got := resp.Header.Get(wire.FeaturesHeader); got != tc.want {
				t.Errorf("upgrade: %s = %q, want %q", wire.FeaturesHeader, got, tc.want)
			}
			_, _, h := do(t, "GET", srv.URL+"/locks/nobody", "", "")
			if got := h.Get(wire.FeaturesHeader); got != tc.want {
				t.Errorf("REST: %s = %q, want %q", wire.FeaturesHeader, got, tc.want)
			}
		})
	}
}

// TestUnsupportedNeverReachesBackend: every request that needs a feature
// the Locker does not report is answered unsupported (naming the
// feature), on both protocols, and none reaches the Locker, which would
// have granted it.
func TestUnsupportedNeverReachesBackend(t *testing.T) {
	h := &hidden{Locker: locktest.NewMemStore().NewLocker()}
	_, srv := startOver(t, h, Options{})
	c := dial(t, srv)
	for i, tc := range []struct {
		req     map[string]any
		feature string
	}{
		{map[string]any{"commandType": 5, "key": "k", "mode": "shared"}, "shared"},
		{map[string]any{"commandType": 1, "key": "k", "mode": "shared"}, "shared"},
		{map[string]any{"commandType": 5, "key": "k", "permits": 3}, "semaphore"},
		{map[string]any{"commandType": 5, "key": "k", "mode": "shared", "permits": 3}, "semaphore"},
		{map[string]any{"commandType": 1, "key": "k", "lockDelayMs": 100}, "lockdelay"},
		{map[string]any{"commandType": 7, "keys": []string{"a", "b"}}, "multikey"},
		{map[string]any{"commandType": 8, "keys": []string{"a"}}, "multikey"},
		{map[string]any{"commandType": 9, "key": "k"}, "watch"},
	} {
		id := fmt.Sprint(i)
		tc.req["id"] = id
		c.send(tc.req)
		if r := c.expect(id, "error", "unsupported"); r.Error.Feature != tc.feature {
			t.Errorf("%v: feature %q, want %q", tc.req, r.Error.Feature, tc.feature)
		}
	}
	// An explicit "exclusive" needs nothing.
	c.send(map[string]any{"id": "x", "commandType": 5, "key": "k", "mode": "exclusive"})
	c.expect("x", "grant", "")
	for _, tc := range []struct{ path, body, feature string }{
		{"/locks/r", `{"mode":"shared"}`, "shared"},
		{"/locks/r", `{"permits":2}`, "semaphore"},
		{"/locks/r", `{"lock_delay_ms":10}`, "lockdelay"},
		{"/locks", `{"keys":["a","b"]}`, "multikey"},
	} {
		code, m, _ := do(t, "POST", srv.URL+tc.path, "application/json", tc.body)
		e, _ := m["error"].(map[string]any)
		if code != 501 || errCode(m) != "unsupported" || e["feature"] != tc.feature {
			t.Errorf("POST %s %s = %d %v, want 501 unsupported naming %s", tc.path, tc.body, code, m, tc.feature)
		}
	}
	if n := h.calls.Load(); n != 1 {
		t.Errorf("the Locker saw %d acquires, want 1 (the exclusive one)", n)
	}
}

// TestInvalidPrimitiveInput: each malformed new field gets its own code,
// on both protocols, and the checks come before unsupported.
func TestInvalidPrimitiveInput(t *testing.T) {
	for _, f := range []lock.Features{lock.AllFeatures, 0} {
		_, srv := startOver(t, locktest.NewMemStoreWithFeatures(f).NewLocker(), Options{})
		c := dial(t, srv)
		many := make([]string, lock.MaxMultiKeys+1)
		for i := range many {
			many[i] = fmt.Sprint("k", i)
		}
		for i, tc := range []struct {
			req  map[string]any
			code string
		}{
			{map[string]any{"commandType": 5, "key": "k", "mode": "read"}, "invalid_mode"},
			{map[string]any{"commandType": 1, "key": "k", "mode": "EXCLUSIVE"}, "invalid_mode"},
			{map[string]any{"commandType": 5, "key": "k", "permits": -1}, "invalid_permits"},
			{map[string]any{"commandType": 5, "key": "k", "permits": lock.MaxPermits + 1}, "invalid_permits"},
			{map[string]any{"commandType": 5, "key": "k", "lockDelayMs": -1}, "invalid_lock_delay"},
			{map[string]any{"commandType": 5, "key": "k", "lockDelayMs": 60001}, "invalid_lock_delay"},
			{map[string]any{"commandType": 5, "key": "k", "lockDelayMs": int64(1) << 62}, "invalid_lock_delay"},
			{map[string]any{"commandType": 8, "keys": []string{}}, "invalid_keys"},
			{map[string]any{"commandType": 8, "keys": []string{"a", "a"}}, "invalid_keys"},
			{map[string]any{"commandType": 7, "keys": many}, "invalid_keys"},
			{map[string]any{"commandType": 8, "keys": []string{"a", ""}}, "invalid_key"},
			{map[string]any{"commandType": 8}, "missing_field"},
			{map[string]any{"commandType": 8, "keys": []string{"a"}, "mode": "x"}, "invalid_mode"},
			{map[string]any{"commandType": 8, "keys": []string{"a"}, "key": "a"}, "bad_json"},
			{map[string]any{"commandType": 5, "key": "a", "keys": []string{"a"}}, "bad_json"},
			{map[string]any{"commandType": 9}, "missing_field"},
			{map[string]any{"commandType": 9, "key": ""}, "invalid_key"},
			{map[string]any{"commandType": 10}, "missing_field"},
			{map[string]any{"commandType": 10, "target": "nope"}, "not_found"},
			{map[string]any{"commandType": wire.MaxCommand + 1}, "unknown_command"},
		} {
			id := fmt.Sprint(i)
			tc.req["id"] = id
			c.send(tc.req)
			c.expect(id, "error", tc.code)
		}
		c.send(map[string]any{"commandType": 9, "key": "k"})
		if f.Has(lock.FeatureWatch) {
			c.expect("", "error", "missing_field") // a watch needs an id
		} else {
			c.expect("", "error", "missing_field") // before unsupported too
		}
		for _, tc := range []struct{ path, body, code string }{
			{"/locks/r", `{"mode":"both"}`, "invalid_mode"},
			{"/locks/r", `{"permits":-2}`, "invalid_permits"},
			{"/locks/r", `{"lock_delay_ms":-5}`, "invalid_lock_delay"},
			{"/locks/r", `{"lockDelayMs":5}`, "bad_json"},
			{"/locks", `{"keys":[]}`, "invalid_keys"},
			{"/locks", `{}`, "missing_field"},
			{"/locks", ``, "missing_field"},
			{"/locks", `{"keys":["a"],"wait_ms":-1}`, "invalid_wait"},
			{"/locks", `{"wait_ms":-1}`, "invalid_wait"}, // before the keys
			{"/locks", `{"keys":["a"],"TTL_MS":5}`, "bad_json"},
			{"/locks", `{"keys":["a"],"lockDelayMs":5}`, "bad_json"},
			{"/locks", `{"keys":["a"],"acquireBody":{}}`, "bad_json"},
		} {
			code, m, _ := do(t, "POST", srv.URL+tc.path, "application/json", tc.body)
			if errCode(m) != tc.code || code != wire.Status(tc.code) {
				t.Errorf("features %v: POST %s %s = %d %v, want %d %s", f, tc.path, tc.body, code, m, wire.Status(tc.code), tc.code)
			}
		}
		if code, m, _ := do(t, "GET", srv.URL+"/locks", "", ""); code != 405 || errCode(m) != "method_not_allowed" {
			t.Errorf("GET /locks = %d %v", code, m)
		}
	}
}

// TestSharedAndSemaphore: read locks coexist and exclude a writer; a
// semaphore admits N; another N is permits_mismatch; grants and inspect
// report mode, permits and every holder, on both protocols.
func TestSharedAndSemaphore(t *testing.T) {
	_, srv := startOver(t, locktest.NewMemStore().NewLocker(), Options{})
	a, b := dial(t, srv), dial(t, srv)
	a.send(map[string]any{"id": "r1", "commandType": 5, "key": "rw", "mode": "shared", "ttl": 60000, "clientId": "a"})
	if g := a.expect("r1", "grant", ""); g.Mode != "shared" || g.Permits != 0 {
		t.Fatalf("shared grant %+v: want mode shared", g)
	}
	b.send(map[string]any{"id": "r2", "commandType": 5, "key": "rw", "mode": "shared", "ttl": 60000, "clientId": "b"})
	b.expect("r2", "grant", "")
	b.send(map[string]any{"id": "w", "commandType": 5, "key": "rw", "ttl": 60000})
	b.expect("w", "error", "held")
	a.send(map[string]any{"id": "i", "commandType": 4, "key": "rw"})
	info := a.expect("i", "info", "")
	if info.Mode != "shared" || len(info.Holders) != 2 || info.Holders[0].Owner != "a" || info.Holders[1].Owner != "b" ||
		info.Holders[0].FencingToken == nil || info.Holders[0].FencingToken.Key != "rw" || info.Holders[1].ExpiresIn == nil {
		t.Fatalf("info %+v: want mode shared with holders a, b", info)
	}
	code, m, _ := do(t, "GET", srv.URL+"/locks/rw", "", "")
	if hs, _ := m["holders"].([]any); code != 200 || m["mode"] != "shared" || len(hs) != 2 {
		t.Fatalf("REST inspect = %d %v", code, m)
	}

	// A semaphore of 2.
	for i, who := range []*wsClient{a, b} {
		id := fmt.Sprint("s", i)
		who.send(map[string]any{"id": id, "commandType": 5, "key": "sem", "permits": 2, "ttl": 60000})
		if g := who.expect(id, "grant", ""); g.Mode != "shared" || g.Permits != 2 {
			t.Fatalf("permit %+v: want mode shared, permits 2", g)
		}
	}
	a.send(map[string]any{"id": "s3", "commandType": 5, "key": "sem", "permits": 2})
	a.expect("s3", "error", "held")
	a.send(map[string]any{"id": "s4", "commandType": 5, "key": "sem", "permits": 3})
	a.expect("s4", "error", "permits_mismatch")
	code, m, _ = do(t, "POST", srv.URL+"/locks/sem", "application/json", `{"permits":5}`)
	if code != 409 || errCode(m) != "permits_mismatch" {
		t.Fatalf("REST permits 5 on a semaphore of 2 = %d %v", code, m)
	}
	a.send(map[string]any{"id": "si", "commandType": 4, "key": "sem"})
	if info := a.expect("si", "info", ""); info.Permits != 2 || info.Mode != "shared" || len(info.Holders) != 2 {
		t.Fatalf("semaphore info %+v", info)
	}
	code, m, _ = do(t, "POST", srv.URL+"/locks/sem2", "application/json", `{"permits":1,"ttl_ms":60000}`)
	if code != 200 || m["mode"] != "shared" || m["permits"] != float64(1) {
		t.Fatalf("REST permit = %d %v", code, m)
	}
}

// TestLockDelay: after a lease with lockDelayMs expires, a try-acquire
// is answered delayed with retryIn (REST: 409 with retry_in_ms), not held.
func TestLockDelay(t *testing.T) {
	_, srv := startOver(t, locktest.NewMemStore().NewLocker(), Options{})
	c := dial(t, srv)
	c.send(map[string]any{"id": "g", "commandType": 5, "key": "ld", "ttl": 20, "lockDelayMs": 60000})
	c.expect("g", "grant", "")
	awaitFree(t, c, "ld")
	c.send(map[string]any{"id": "t", "commandType": 5, "key": "ld"})
	r := c.expect("t", "error", "delayed")
	if r.Error.RetryIn <= 0 || r.Error.RetryIn > 60000 {
		t.Fatalf("delayed %+v: want 0 < retryIn ≤ 60000", r.Error)
	}
	code, m, _ := do(t, "POST", srv.URL+"/locks/ld", "application/json", `{}`)
	e, _ := m["error"].(map[string]any)
	if ms, _ := e["retry_in_ms"].(float64); code != 409 || errCode(m) != "delayed" || ms <= 0 {
		t.Fatalf("REST try-acquire in the delay = %d %v", code, m)
	}
}

// awaitFree polls inspect until key has no holder (bounded).
func awaitFree(t *testing.T, c *wsClient, key string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for i := 0; ; i++ {
		id := fmt.Sprint("free", i)
		c.send(map[string]any{"id": id, "commandType": 4, "key": key})
		if r := c.recv(); r.Type == "error" && r.Error.Code == "not_found" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s still held after 10 s", key)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAcquireAll: one grants message with a lease per key in order; a
// held key fails the whole try and leaves the others free; a waiting
// acquireAll is granted when the last key frees, can be cancelled, and is
// bounded by waitMs and by the connection's lock limit; REST POST /locks.
func TestAcquireAll(t *testing.T) {
	_, srv := startOver(t, locktest.NewMemStore().NewLocker(), Options{MaxLocksPerConn: 4})
	a, b := dial(t, srv), dial(t, srv)
	a.send(map[string]any{"id": "1", "commandType": 8, "keys": []string{"m/b", "m/a"}, "ttl": 60000, "mode": "exclusive"})
	g := a.expect("1", "grants", "")
	if len(g.Leases) != 2 || g.Leases[0].Key != "m/b" || g.Leases[1].Key != "m/a" || g.Leases[0].LockToken == "" ||
		g.Leases[0].FencingToken == nil || g.Leases[0].FencingToken.Key != "m/b" || g.Leases[0].TTL != 60000 {
		t.Fatalf("grants %+v: want leases for m/b, m/a in order", g)
	}
	b.send(map[string]any{"id": "2", "commandType": 8, "keys": []string{"m/c", "m/a"}})
	b.expect("2", "error", "held")
	b.send(map[string]any{"id": "3", "commandType": 4, "key": "m/c"})
	b.expect("3", "error", "not_found") // nothing held of a failed try

	b.send(map[string]any{"id": "w", "commandType": 7, "keys": []string{"m/c", "m/a"}, "ttl": 60000})
	lease := g.Leases[1]
	if p := a.expect("", "wanted", ""); p.Key != "m/a" { // b waits: it is queued
		t.Fatalf("push %+v: want m/a wanted", p)
	}
	a.send(map[string]any{"id": "r", "commandType": 2, "key": "m/a", "lockToken": lease.LockToken, "fencingToken": lease.FencingToken, "ack": true})
	a.expect("r", "released", "")
	if w := b.expect("w", "grants", ""); len(w.Leases) != 2 || w.Leases[0].Key != "m/c" || w.Leases[1].FencingToken.Value <= lease.FencingToken.Value {
		t.Fatalf("waited grants %+v", w)
	}

	// Cancel and waitMs.
	b.send(map[string]any{"id": "w2", "commandType": 7, "keys": []string{"m/b", "m/d"}})
	b.send(map[string]any{"id": "x", "commandType": 6, "target": "w2"})
	b.expect("x", "cancelled", "")
	b.expect("w2", "error", "cancelled")
	a.send(map[string]any{"id": "w3", "commandType": 7, "keys": []string{"m/d", "m/c"}, "waitMs": 20})
	expectPast(a, "wanted", "w3", "error", "timeout") // b's cancelled wait made a's m/b wanted
	a.send(map[string]any{"id": "w4", "commandType": 7, "keys": []string{"m/e"}, "waitMs": 300001})
	expectPast(a, "wanted", "w4", "error", "invalid_wait")

	// The lock limit counts every key: b holds 2 of its 4.
	b.send(map[string]any{"id": "l", "commandType": 8, "keys": []string{"n/1", "n/2", "n/3"}})
	expectPast(b, "wanted", "l", "error", "too_many_locks")
	b.send(map[string]any{"id": "l2", "commandType": 7, "keys": []string{"n/1", "n/2", "n/3"}})
	expectPast(b, "wanted", "l2", "error", "too_many_locks")
	b.send(map[string]any{"id": "l3", "commandType": 8, "keys": []string{"n/1", "n/2"}})
	expectPast(b, "wanted", "l3", "grants", "")

	// REST.
	code, m, _ := do(t, "POST", srv.URL+"/locks", "application/json", `{"keys":["r/1","r/2"],"ttl_ms":60000,"mode":"shared"}`)
	ls, _ := m["leases"].([]any)
	if code != 200 || len(ls) != 2 || ls[0].(map[string]any)["key"] != "r/1" || ls[1].(map[string]any)["mode"] != "shared" {
		t.Fatalf("POST /locks = %d %v", code, m)
	}
	code, m, _ = do(t, "POST", srv.URL+"/locks", "application/json", `{"keys":["r/3","m/b"]}`)
	if code != 409 || errCode(m) != "held" {
		t.Fatalf("POST /locks with a held key = %d %v", code, m)
	}
	code, m, _ = do(t, "POST", srv.URL+"/locks", "application/json", `{"keys":["r/3","r/4"],"wait_ms":5000}`)
	if ls, _ := m["leases"].([]any); code != 200 || len(ls) != 2 {
		t.Fatalf("POST /locks with wait_ms = %d %v", code, m)
	}
}

// TestAcquireAllTicket: a REST acquireAll that outlives the synchronous
// window gets a ticket whose poll answers the leases.
func TestAcquireAllTicket(t *testing.T) {
	_, srv := startOver(t, locktest.NewMemStore().NewLocker(), Options{SyncWindow: 10 * time.Millisecond})
	code, m, _ := do(t, "POST", srv.URL+"/locks/tb", "application/json", `{"ttl_ms":60000}`)
	if code != 200 {
		t.Fatal(code, m)
	}
	code, tk, _ := do(t, "POST", srv.URL+"/locks", "application/json", `{"keys":["ta","tb"],"wait_ms":60000}`)
	if code != 202 {
		t.Fatalf("POST /locks on a held key with wait_ms = %d %v, want 202", code, tk)
	}
	rel := fmt.Sprintf(`{"lock_token":%q,"fencing_token":%s}`, m["lock_token"], jsonOf(t, m["fencing_token"]))
	if code, m, _ := do(t, "DELETE", srv.URL+"/locks/tb", "application/json", rel); code != 204 {
		t.Fatal(code, m)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		code, m, _ := do(t, "GET", srv.URL+tk["poll"].(string), "", "")
		if code == 202 && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
			continue
		}
		if ls, _ := m["leases"].([]any); code != 200 || len(ls) != 2 {
			t.Fatalf("poll = %d %v, want 200 with 2 leases", code, m)
		}
		return
	}
}

// TestWatch: a watch gets the current holders, synced, then grants and
// releases as they happen, each with the watch's id; unwatch answers
// unwatched and nothing of the watch follows; ids are unique per
// connection; the watch count is bounded; watches end with the
// connection.
func TestWatch(t *testing.T) {
	store := locktest.NewMemStore()
	g, srv := startOver(t, store.NewLocker(), Options{MaxWatchesPerConn: 2})
	a, w := dial(t, srv), dial(t, srv)
	a.send(map[string]any{"id": "g", "commandType": 5, "key": "wk", "ttl": 60000, "clientId": "a", "value": "v1"})
	grant := a.expect("g", "grant", "")

	w.send(map[string]any{"id": "W", "commandType": 9, "key": "wk"})
	h := w.expect("W", "event", "")
	if h.Event != "holder" || h.Owner != "a" || h.FencingToken == nil || *h.FencingToken != *grant.FencingToken || h.Value == nil || *h.Value != "v1" || h.Key != "wk" {
		t.Fatalf("first event %+v: want the holder a with the grant's token", h)
	}
	if s := w.expect("W", "event", ""); s.Event != "synced" {
		t.Fatalf("second event %+v: want synced", s)
	}
	a.send(map[string]any{"id": "r", "commandType": 2, "key": "wk", "lockToken": grant.LockToken, "fencingToken": grant.FencingToken})
	if r := w.expect("W", "event", ""); r.Event != "released" || r.FencingToken.Value != grant.FencingToken.Value || r.Revision <= h.Revision {
		t.Fatalf("event %+v: want released of token %d with a later revision", r, grant.FencingToken.Value)
	}
	a.send(map[string]any{"id": "g2", "commandType": 5, "key": "wk", "mode": "shared", "ttl": 60000, "clientId": "b"})
	g2 := a.expect("g2", "grant", "")
	if e := w.expect("W", "event", ""); e.Event != "granted" || e.Owner != "b" || e.Mode != "shared" || e.FencingToken.Value != g2.FencingToken.Value {
		t.Fatalf("event %+v: want granted to b (shared)", e)
	}

	// Ids and limits.
	w.send(map[string]any{"id": "W", "commandType": 9, "key": "other"})
	w.expect("W", "error", "duplicate_id")
	w.send(map[string]any{"id": "W2", "commandType": 9, "key": "other"})
	w.expect("W2", "event", "") // synced: nobody holds it
	w.send(map[string]any{"id": "W3", "commandType": 9, "key": "third"})
	w.expect("W3", "error", "too_many_watches")
	if n := valueOf(g.metrics.watches); n != 2 {
		t.Errorf("lockgate_watches = %v, want 2", n)
	}

	w.send(map[string]any{"id": "u", "commandType": 10, "target": "W"})
	if u := w.expect("u", "unwatched", ""); u.Key != "wk" {
		t.Fatalf("unwatched %+v: want key wk", u)
	}
	a.send(map[string]any{"id": "r2", "commandType": 2, "key": "wk", "lockToken": g2.LockToken, "fencingToken": g2.FencingToken, "ack": true})
	a.expect("r2", "released", "")
	w.quiet(50 * time.Millisecond) // no released event of the ended watch
	w.send(map[string]any{"id": "u2", "commandType": 10, "target": "W"})
	w.expect("u2", "error", "not_found")
	w.send(map[string]any{"id": "W3", "commandType": 9, "key": "third"}) // a slot freed
	w.expect("W3", "event", "")
	// holder, synced, released, granted of W; synced of W2 and of W3.
	awaitGauge(t, func() float64 { return valueOf(g.metrics.watchEvents) }, 6)

	// The connection's end ends its watches.
	w.ws.Close()
	awaitGauge(t, func() float64 { return valueOf(g.metrics.watches) }, 0)
}

// awaitGauge waits (bounded) until read() is want.
func awaitGauge(t *testing.T, read func() float64, want float64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for read() != want {
		if time.Now().After(deadline) {
			t.Fatalf("gauge is %v, want %v", read(), want)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestWatchEndsWhenLockerCloses: a watch whose backend channel closes
// without an error (the Locker closed) ends with an error event, code
// closed.
func TestWatchEndsWhenLockerCloses(t *testing.T) {
	l := locktest.NewMemStore().NewLocker()
	_, srv := startOver(t, l, Options{})
	c := dial(t, srv)
	c.send(map[string]any{"id": "W", "commandType": 9, "key": "k"})
	c.expect("W", "event", "") // synced
	l.Close()
	if e := c.expect("W", "event", "closed"); e.Event != "error" || e.Success {
		t.Fatalf("final event %+v: want event error, success false", e)
	}
}

// TestWatchOverflow: a client that never reads gets its watch ended with
// watch_overflow once the watch's queue fills, while the backend's
// changes go on unhindered; when it reads again it finds the events
// written before, then the final error, and the connection still answers.
func TestWatchOverflow(t *testing.T) {
	store := locktest.NewMemStore()
	g, srv := startOver(t, store.NewLocker(), Options{WatchBuffer: 64, WriteTimeout: time.Minute, IdleTimeout: time.Minute})
	overflowed := make(chan struct{}, 1)
	g.watchOverflowed = func() {
		select {
		case overflowed <- struct{}{}:
		default:
		}
	}
	ws, _, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	c := &wsClient{t: t, ws: ws}
	c.send(map[string]any{"id": "W", "commandType": 9, "key": "busy"})

	// Churn the key through another connection until the watch
	// overflows; the watching client reads nothing meanwhile. Paced by
	// the gateway's round trips, the churn cannot outrun the watch's
	// writes to a connection that takes them: the queue fills only once
	// the watcher's socket is full.
	ch := dial(t, srv)
	value := strings.Repeat("x", 4000) // bigger events fill the socket sooner
	deadline := time.Now().Add(60 * time.Second)
	cycles := 0
churn:
	for {
		select {
		case <-overflowed:
			break churn
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no overflow after %d acquire/release cycles", cycles)
		}
		ch.send(map[string]any{"id": "a", "commandType": 5, "key": "busy", "ttl": 60000, "value": value})
		g := ch.expect("a", "grant", "")
		ch.send(map[string]any{"id": "r", "commandType": 2, "key": "busy", "lockToken": g.LockToken, "fencingToken": g.FencingToken, "ack": true})
		ch.expect("r", "released", "")
		cycles++
	}
	t.Logf("overflow after %d cycles", cycles)

	var types []string
	for {
		r := c.recv()
		if r.ID != "W" || r.Type != "event" {
			t.Fatalf("unexpected message %+v", r)
		}
		types = append(types, r.Event)
		if r.Event == "error" {
			if r.Error == nil || r.Error.Code != "watch_overflow" {
				t.Fatalf("final event %+v: want code watch_overflow", r)
			}
			break
		}
	}
	// The churn may hold the key when the watch starts: a holder first.
	// Events were written until the socket filled: more than the queue.
	if len(types) < 64 || slices.Index(types, "synced") > 1 || slices.Index(types, "error") != len(types)-1 {
		t.Fatalf("events %v: want synced first (after at most one holder) and the error last", types)
	}
	c.quiet(20 * time.Millisecond) // nothing more of the watch; the connection answers
	if n := valueOf(g.metrics.errors.WithLabelValues("watch_overflow")); n != 1 {
		t.Errorf("errors{watch_overflow} = %v, want 1", n)
	}
	awaitGauge(t, func() float64 { return valueOf(g.metrics.watches) }, 0)
}

// valueOf reads a gauge's or a counter's value.
func valueOf(m prometheus.Metric) float64 {
	var d dto.Metric
	m.Write(&d)
	if d.Gauge != nil {
		return d.Gauge.GetValue()
	}
	return d.Counter.GetValue()
}

// expectPast reads messages, skipping id-less pushes of type push, until
// the one expected.
func expectPast(c *wsClient, push, id, typ, code string) wire.Reply {
	c.t.Helper()
	for {
		r := c.recv()
		if r.ID == "" && r.Type == push {
			continue
		}
		return c.check(r, id, typ, code)
	}
}
