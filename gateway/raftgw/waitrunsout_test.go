package raftgw

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// TestRESTWaitRunsOutDuringCommit: a wait_ms of 1 on a free key runs out
// while the grant is being committed about as often as not. Each answer is
// the grant (200) or the documented answer for a wait that ran out (408
// timeout), never 503 unavailable; and a wait that ran out leaves nothing
// held: raftlock releases a grant that commits after its caller gave up.
func TestRESTWaitRunsOutDuringCommit(t *testing.T) {
	c := startRaft(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := "http://" + l.APIAddr() + "/locks/"
	var granted, ranOut []string
	for i := range 40 {
		key := fmt.Sprintf("short-%d", i)
		code, m, _ := do(t, "POST", base+key, "", `{"client_id":"a","ttl_ms":60000,"wait_ms":1}`)
		switch {
		case code == 200:
			granted = append(granted, key)
		case code == 408 && errCode(m) == "timeout":
			ranOut = append(ranOut, key)
		default:
			t.Errorf("POST %s with wait_ms 1 = %d %v, want 200 or 408 timeout", key, code, m)
		}
	}
	t.Logf("%d granted, %d ran out", len(granted), len(ranOut))
	// Nothing is held for a wait that ran out: the key is free, at once
	// or once the late grant's release commits.
	deadline := time.Now().Add(10 * time.Second)
	for _, key := range ranOut {
		for {
			code, m, _ := do(t, "GET", base+key, "", "")
			if code == 404 {
				break
			}
			if code != 200 || time.Now().After(deadline) {
				t.Fatalf("key %s after a wait that ran out = %d %v, want it free (404)", key, code, m)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, key := range granted {
		if code, m, _ := do(t, "GET", base+key, "", ""); code != 200 || m["owner"] != "a" {
			t.Errorf("granted key %s = %d %v, want held by a", key, code, m)
		}
	}
}
