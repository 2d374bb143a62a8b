package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/lockgate/lockgate/internal/wire"
)

// TestPoisonRenewRelease is a poison run: four well-behaved REST
// clients acquire and release their keys in a loop on a three-node raftlock
// cluster while a fifth sends renews and releases with oversize lock tokens
// and oversize keys. Before every op was validated ahead of its Raft batch,
// one such request made the state machine reject the whole shared entry:
// the bad request got 503 and so did the good ops it was batched with (6
// acquires and 3 releases in a 4 s run), whose locks then stayed held until
// their TTL. Now each bad request gets its own 400 invalid_*, and the four
// see no failure at all.
func TestPoisonRenewRelease(t *testing.T) {
	c := startRaft(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.APIAddr() + "/locks/"
	client := &http.Client{Timeout: 10 * time.Second}

	const (
		good = 4
		run  = 3 * time.Second
	)
	stop := make(chan struct{})
	var (
		wg                  sync.WaitGroup
		goodOps, goodFailed atomic.Int64
		failures            sync.Map // first few failures, for the message
	)
	keys := make([]string, good)
	for i := range good {
		keys[i] = fmt.Sprintf("poison-good-%d", i)
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(what string, code int, m map[string]any, err error) {
				if goodFailed.Add(1) <= 5 {
					failures.Store(fmt.Sprintf("client %d %s", i, what), fmt.Sprintf("%d %v %v", code, m, err))
				}
			}
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A short TTL would let an acquire wait behind a lock that
				// a failed release left held; a long one makes any such
				// leak visible at the end (the key is still held).
				code, m, err := poisonDo(client, "POST", base+keys[i], fmt.Sprintf(`{"client_id":"good-%d","ttl_ms":60000}`, i))
				goodOps.Add(1)
				if err != nil || code != http.StatusOK {
					fail("acquire", code, m, err)
					continue
				}
				body := fmt.Sprintf(`{"lock_token":%q,"fencing_token":%v}`, m["lock_token"], tokenValue(m["fencing_token"]))
				code, m, err = poisonDo(client, "DELETE", base+keys[i], body)
				goodOps.Add(1)
				if err != nil || code != http.StatusNoContent {
					fail("release", code, m, err)
				}
			}
		}()
	}

	// The fifth client: renews and releases, over REST and WebSocket,
	// naming a real key with a 300-character lock token (over the state
	// machine's 256-byte handle limit), or a 2,000-byte key (over its
	// 1,024-byte key limit).
	ws, _, err := websocket.DefaultDialer.Dial("ws://"+l.APIAddr()+"/v1/ws", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	type badResult struct {
		what string
		code int
		err  string
	}
	var bad []badResult
	var badErrs []error
	wg.Add(1)
	go func() {
		defer wg.Done()
		longToken := strings.Repeat("a", 300)
		longKey := strings.Repeat("k", 2000)
		const lockTokenZero = "00000000000000000000000000000000"
		reqs := []struct{ method, url, body string }{
			{"DELETE", base + keys[0], fmt.Sprintf(`{"lock_token":%q,"fencing_token":1}`, longToken)},
			{"PUT", base + keys[1], fmt.Sprintf(`{"lock_token":%q,"fencing_token":1,"ttl_ms":5000}`, longToken)},
			{"DELETE", base + keys[2] + "?fencing_token=1&lock_token=" + longToken, ""},
			{"DELETE", base + longKey, `{"lock_token":"` + lockTokenZero + `","fencing_token":1}`},
			{"PUT", base + longKey, `{"lock_token":"` + lockTokenZero + `","fencing_token":1,"ttl_ms":5000}`},
		}
		frames := []wire.Request{
			{CommandType: wire.CmdRelease, Key: keys[3], LockToken: longToken, FencingToken: &wire.FencingToken{Key: keys[3], Value: 1}, Ack: true},
			{CommandType: wire.CmdRenew, Key: keys[0], LockToken: longToken, FencingToken: &wire.FencingToken{Key: keys[0], Value: 1}, TTL: 5000},
			{CommandType: wire.CmdRelease, Key: longKey, LockToken: lockTokenZero, FencingToken: &wire.FencingToken{Key: longKey, Value: 1}, Ack: true},
			{CommandType: wire.CmdRenew, Key: longKey, LockToken: lockTokenZero, FencingToken: &wire.FencingToken{Key: longKey, Value: 1}, TTL: 5000},
		}
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			f := frames[n%len(frames)]
			f.ID = fmt.Sprint(n)
			var reply wire.Reply
			ws.SetReadDeadline(time.Now().Add(10 * time.Second))
			if err := ws.WriteJSON(f); err != nil {
				badErrs = append(badErrs, err)
				return
			}
			if err := ws.ReadJSON(&reply); err != nil {
				badErrs = append(badErrs, err)
				return
			}
			br := badResult{what: fmt.Sprintf("ws command %d key %.20s", f.CommandType, f.Key), code: 200}
			if reply.Error != nil {
				br.code, br.err = 400, reply.Error.Code // WebSocket errors carry no status: a code is the answer
			}
			if reply.ID != f.ID {
				br.err = "reply to " + reply.ID
			}
			bad = append(bad, br)
			r := reqs[n%len(reqs)]
			code, m, err := poisonDo(client, r.method, r.url, r.body)
			if err != nil {
				badErrs = append(badErrs, err)
				continue
			}
			bad = append(bad, badResult{fmt.Sprintf("%s %.60s", r.method, r.url), code, errCode(m)})
		}
	}()

	time.Sleep(run) // the length of the run, not a synchronisation
	close(stop)
	wg.Wait()

	failures.Range(func(k, v any) bool {
		t.Errorf("good %s failed: %s", k, v)
		return true
	})
	t.Logf("good ops %d (failed %d), bad requests %d", goodOps.Load(), goodFailed.Load(), len(bad))
	if n := goodFailed.Load(); n != 0 {
		t.Errorf("%d of %d well-behaved operations failed beside the poison client; want 0", n, goodOps.Load())
	}
	if goodOps.Load() < 4*good {
		t.Errorf("only %d good operations ran: the run proves nothing", goodOps.Load())
	}
	if len(bad) < 10 {
		t.Errorf("only %d bad requests were answered (errors %v)", len(bad), badErrs)
	}
	for _, e := range badErrs {
		t.Errorf("bad request: %v", e)
	}
	wrong := 0
	for _, b := range bad {
		if b.code/100 != 4 || !strings.HasPrefix(b.err, "invalid_") {
			if wrong++; wrong <= 5 {
				t.Errorf("bad request %s = %d %q, want 4xx invalid_*", b.what, b.code, b.err)
			}
		}
	}
	if wrong > 0 {
		t.Errorf("%d of %d bad requests were not refused as invalid", wrong, len(bad))
	}
	// Nothing leaked: every good client released what it was granted, and
	// no bad request took or kept anything.
	for _, k := range keys {
		if code, m, err := poisonDo(client, "GET", base+k, ""); err != nil || code != http.StatusNotFound {
			t.Errorf("after the run, GET %s = %d %v %v; want 404 (not held)", k, code, m, err)
		}
	}
}

// poisonDo is do for goroutines: it returns errors instead of failing the
// test.
func poisonDo(client *http.Client, method, url, body string) (int, map[string]any, error) {
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var m map[string]any
	if len(data) > 0 {
		if err := json.Unmarshal(data, &m); err != nil {
			return resp.StatusCode, nil, fmt.Errorf("%s %.80s: non-JSON body %q", method, url, data)
		}
	}
	return resp.StatusCode, m, nil
}
