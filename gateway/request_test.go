package gateway

import (
	"fmt"
	"strings"
	"testing"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// TestAcquireRefusalsSameOverBothProtocols: one conversion checks an
// acquire's options for both protocols, so a faulty acquire is refused
// with the same code and the same message over WebSocket and REST, before
// the Locker sees it; on a Locker without features, what needs one is
// unsupported over both.
func TestAcquireRefusalsSameOverBothProtocols(t *testing.T) {
	long := strings.Repeat("v", lock.MaxValueLen+1)
	for _, f := range []lock.Features{lock.AllFeatures | lock.FeatureSessions, 0} {
		_, srv := startOver(t, locktest.NewMemStoreWithFeatures(f).NewLocker(), Options{})
		c := dial(t, srv)
		for i, tc := range []struct {
			ws, rest map[string]any
			// the code on a Locker with every feature, and on one with none
			// (the memory Locker keeps no sessions: a session acquire is
			// unsupported on both, before its id's form is checked)
			all, none string
		}{
			{map[string]any{"ttl": -5}, map[string]any{"ttl_ms": -5}, "invalid_ttl", "invalid_ttl"},
			{map[string]any{"ttl": 5}, map[string]any{"ttl_ms": 5}, "invalid_ttl", "invalid_ttl"},
			{map[string]any{"value": long}, map[string]any{"value": long}, "invalid_value", "invalid_value"},
			{map[string]any{"mode": "read"}, map[string]any{"mode": "read"}, "invalid_mode", "invalid_mode"},
			{map[string]any{"permits": -1}, map[string]any{"permits": -1}, "invalid_permits", "invalid_permits"},
			{map[string]any{"lockDelayMs": -1}, map[string]any{"lock_delay_ms": -1}, "invalid_lock_delay", "invalid_lock_delay"},
			{map[string]any{"lockToken": "XYZ"}, map[string]any{"lock_token": "XYZ"}, "invalid_handle", "invalid_handle"},
			{map[string]any{"clientId": "a\x01b"}, map[string]any{"client_id": "a\x01b"}, "invalid_owner", "invalid_owner"},
			{map[string]any{"mode": "shared", "ttl": -5}, map[string]any{"mode": "shared", "ttl_ms": -5}, "invalid_ttl", "invalid_ttl"},
			{map[string]any{"mode": "shared"}, map[string]any{"mode": "shared"}, "", "unsupported"},
			{map[string]any{"permits": 2, "lockDelayMs": 10}, map[string]any{"permits": 2, "lock_delay_ms": 10}, "", "unsupported"},
			{map[string]any{"sessionId": "nope"}, map[string]any{"session_id": "nope"}, "unsupported", "unsupported"},
			{map[string]any{"mode": "read", "sessionId": "nope"}, map[string]any{"mode": "read", "session_id": "nope"}, "invalid_mode", "invalid_mode"},
		} {
			want := tc.all
			if f == 0 {
				want = tc.none
			}
			key := fmt.Sprint("same-", i)
			id := fmt.Sprint("a", i)
			tc.ws["id"], tc.ws["commandType"], tc.ws["key"] = id, 5, key
			c.send(tc.ws)
			r := c.recv()
			wsCode, wsMsg := "", ""
			if r.Error != nil {
				wsCode, wsMsg = r.Error.Code, r.Error.Message
			}
			_, body, _ := do(t, "POST", srv.URL+"/locks/"+key+"-rest", "", jsonOf(t, tc.rest))
			restCode := errCode(body)
			e, _ := body["error"].(map[string]any)
			restMsg, _ := e["message"].(string)
			if wsCode != want || restCode != want {
				t.Errorf("features %v, case %d (%v): WebSocket %q, REST %q, want %q", f, i, tc.ws, wsCode, restCode, want)
				continue
			}
			// The messages name the key; with it replaced they are one.
			if strings.ReplaceAll(restMsg, key+"-rest", key) != wsMsg {
				t.Errorf("features %v, case %d: WebSocket says %q, REST %q", f, i, wsMsg, restMsg)
			}
		}
	}
}
