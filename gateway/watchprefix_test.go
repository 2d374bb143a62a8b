package gateway

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// prefixLocker is the reference locker made a lock.PrefixWatcher whose
// events the test writes: the gateway's plumbing of prefix watches
// without a backend's (raftlock's own is tested in backend/raftlock, and
// end to end in internal/spec).
type prefixLocker struct {
	lock.Locker
	mu     sync.Mutex
	opened []string               // the prefixes asked for
	feeds  chan chan<- lock.Event // one per WatchPrefix, for the test
}

func newPrefixLocker() *prefixLocker {
	return &prefixLocker{Locker: locktest.NewMemStore().NewLocker(), feeds: make(chan chan<- lock.Event, 4)}
}

func (p *prefixLocker) Features() lock.Features { return lock.FeaturesOf(p.Locker) }

func (p *prefixLocker) Watch(ctx context.Context, key string) (<-chan lock.Event, error) {
	return p.Locker.(lock.Watcher).Watch(ctx, key)
}

func (p *prefixLocker) WatchPrefix(ctx context.Context, prefix string) (<-chan lock.Event, error) {
	p.mu.Lock()
	p.opened = append(p.opened, prefix)
	p.mu.Unlock()
	ch := make(chan lock.Event, 16)
	ch <- lock.Event{Type: lock.EventSynced, Key: prefix, Revision: 10}
	p.feeds <- ch
	return ch, nil
}

// TestWatchPrefix: a watch with prefix reaches WatchPrefix (key "" or
// absent: every key), its synced carries the prefix, and each later event
// carries its own key (in key and fencingToken), not the prefix; unwatch
// names the prefix; the gateway announces watchprefix.
func TestWatchPrefix(t *testing.T) {
	p := newPrefixLocker()
	_, srv := startOver(t, p, Options{})
	ws, resp, err := websocket.DefaultDialer.Dial("ws"+strings.TrimPrefix(srv.URL, "http")+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ws.Close() })
	if f := resp.Header.Get(wire.FeaturesHeader); !strings.Contains(f+",", ",watchprefix,") {
		t.Errorf("%s = %q, want watchprefix announced", wire.FeaturesHeader, f)
	}
	c := &wsClient{t: t, ws: ws}

	c.send(map[string]any{"id": "P", "commandType": 9, "key": "orders/", "prefix": true})
	if s := c.expect("P", "event", ""); s.Event != "synced" || s.Key != "orders/" || s.Revision != 10 {
		t.Fatalf("first event %+v, want synced of orders/ at revision 10", s)
	}
	feed := <-p.feeds
	feed <- lock.Event{Type: lock.EventGranted, Key: "orders/1", Owner: "a", Token: 7, Revision: 11}
	feed <- lock.Event{Type: lock.EventExpired, Key: "orders/2", Token: 5, Revision: 12}
	for _, want := range []struct {
		event, key string
		token      uint64
	}{{"granted", "orders/1", 7}, {"expired", "orders/2", 5}} {
		e := c.expect("P", "event", "")
		if e.Event != want.event || e.Key != want.key || e.FencingToken == nil || *e.FencingToken != (wire.FencingToken{Key: want.key, Value: want.token}) {
			t.Errorf("event %+v (token %+v), want %s of %s with token %d of that key", e, e.FencingToken, want.event, want.key, want.token)
		}
	}
	c.send(map[string]any{"id": "u", "commandType": 10, "target": "P"})
	if u := c.expect("u", "unwatched", ""); u.Key != "orders/" {
		t.Errorf("unwatched %+v, want the prefix as key", u)
	}

	// Every key: key "" or absent.
	c.send(map[string]any{"id": "A", "commandType": 9, "key": "", "prefix": true})
	if s := c.expect("A", "event", ""); s.Event != "synced" || s.Key != "" {
		t.Fatalf("first event %+v, want synced without key", s)
	}
	c.send(map[string]any{"id": "B", "commandType": 9, "prefix": true})
	c.expect("B", "event", "")
	feed = <-p.feeds
	feed <- lock.Event{Type: lock.EventReleased, Key: "x", Token: 3, Revision: 11}
	if e := c.expect("A", "event", ""); e.Event != "released" || e.Key != "x" {
		t.Errorf("event %+v, want released of x", e)
	}
	p.mu.Lock()
	opened := strings.Join(p.opened, "|")
	p.mu.Unlock()
	if opened != "orders/||" {
		t.Errorf("WatchPrefix called with %q, want orders/, \"\" and \"\"", opened)
	}

	// A key watch beside them is still one key's: events carry the key.
	c.send(map[string]any{"id": "K", "commandType": 9, "key": "k"})
	if s := c.expect("K", "event", ""); s.Event != "synced" || s.Key != "k" {
		t.Errorf("key watch's synced %+v", s)
	}
}

// TestWatchPrefixRefused: malformed prefix watches are refused before
// unsupported, and a Locker that is no PrefixWatcher (or offers no watch)
// answers unsupported naming the missing feature without being called.
func TestWatchPrefixRefused(t *testing.T) {
	p := newPrefixLocker()
	_, srv := startOver(t, p, Options{})
	c := dial(t, srv)
	for i, tc := range []struct {
		req  map[string]any
		code string
	}{
		{map[string]any{"commandType": 9, "key": "a\x01", "prefix": true}, "invalid_key"},
		{map[string]any{"commandType": 9, "key": strings.Repeat("k", lock.MaxKeyLen+1), "prefix": true}, "invalid_key"},
		{map[string]any{"commandType": 9, "key": "", "prefix": false}, "invalid_key"},
		{map[string]any{"commandType": 9, "prefix": false}, "missing_field"},
		{map[string]any{"commandType": 4, "key": "k", "prefix": true}, "bad_json"},
		{map[string]any{"commandType": 9, "key": "k", "prefix": "yes"}, "bad_json"},
	} {
		id := string(rune('a' + i))
		tc.req["id"] = id
		c.send(tc.req)
		c.expect(id, "error", tc.code)
	}
	p.mu.Lock()
	if len(p.opened) != 0 {
		t.Errorf("WatchPrefix called for malformed requests: %q", p.opened)
	}
	p.mu.Unlock()

	for _, tc := range []struct {
		name    string
		l       lock.Locker
		feature string
	}{
		{"no PrefixWatcher", locktest.NewMemStore().NewLocker(), "watchprefix"},
		{"no watch", &hidden{Locker: locktest.NewMemStore().NewLocker()}, "watch"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, srv := startOver(t, tc.l, Options{})
			c := dial(t, srv)
			c.send(map[string]any{"id": "P", "commandType": 9, "key": "", "prefix": true})
			if r := c.expect("P", "error", "unsupported"); r.Error.Feature != tc.feature {
				t.Errorf("feature %q, want %q", r.Error.Feature, tc.feature)
			}
		})
	}
}
