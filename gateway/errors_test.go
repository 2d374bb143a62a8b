package gateway

import (
	"fmt"
	"testing"
	"time"

	"github.com/lockgate/lockgate/internal/wire"
	"github.com/lockgate/lockgate/lock"
)

// TestToAPIError: every lock error of the protocol's table, bare or
// wrapped by a backend, is answered with its code and the code's HTTP
// status; structured errors keep the leader or holder they name.
func TestToAPIError(t *testing.T) {
	for _, c := range wire.Codes {
		if c.Cause == nil {
			continue
		}
		e := toAPIError(fmt.Errorf("backend: %w", c.Cause))
		if e.Code != c.Name || e.status != c.Status {
			t.Errorf("%v: code %s, status %d; want %s, %d", c.Cause, e.Code, e.status, c.Name, c.Status)
		}
	}
	e := toAPIError(&lock.NotLeaderError{LeaderID: "2", LeaderAddr: "h:1"})
	if e.Code != wire.CodeNotLeader || e.status != 421 || e.Leader == nil || *e.Leader != (wire.Leader{ID: "2", Addr: "h:1"}) {
		t.Errorf("not leader: %+v, status %d", e.Error, e.status)
	}
	e = toAPIError(&lock.HeldError{Key: "k", Owner: "o", Token: 5, Expires: time.Now().Add(time.Hour)})
	if e.Code != wire.CodeHeld || e.status != 409 || e.Holder == nil || e.Holder.Owner != "o" || e.Holder.FencingToken == nil || *e.Holder.FencingToken != (wire.FencingToken{Key: "k", Value: 5}) || e.Holder.ExpiresIn <= 0 {
		t.Errorf("held: %+v, status %d", e.Error, e.status)
	}
	if e := toAPIError(lock.ErrNotAcquired); e.Code != wire.CodeHeld || e.Holder != nil {
		t.Errorf("bare ErrNotAcquired: %+v", e.Error)
	}
	if e := toAPIError(fmt.Errorf("raft: timed out")); e.Code != wire.CodeUnavailable || e.status != 503 {
		t.Errorf("an unclassified error: %+v, status %d; want unavailable, 503", e.Error, e.status)
	}
}
