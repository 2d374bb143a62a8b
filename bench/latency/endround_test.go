package latency

import (
	"context"
	"testing"
	"time"
)

// TestEndRoundMinOps: a round with MinOps goes on past its length until
// the operation that makes MinOps, and no longer than MinOpsWait past it
// when none comes; without MinOps it ends at its length.
func TestEndRoundMinOps(t *testing.T) {
	armed := func(rc *recorder) bool {
		rc.mu.Lock()
		defer rc.mu.Unlock()
		return rc.reached != nil
	}
	done := func(ctx context.Context, what string) {
		t.Helper()
		select {
		case <-ctx.Done():
		case <-time.After(10 * time.Second):
			t.Fatalf("%s: the round did not end within 10 s", what)
		}
	}

	rc := &recorder{}
	ctx, cancel := context.WithCancel(context.Background())
	go endRound(ctx, cancel, time.Millisecond, 2, time.Hour, rc)
	rc.count()
	for deadline := time.Now().Add(10 * time.Second); !armed(rc); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("past its length with 1 of 2 operations, the round is not waiting for the second")
		}
	}
	if ctx.Err() != nil {
		t.Fatal("the round ended with 1 of 2 operations and an hour to wait")
	}
	rc.count()
	done(ctx, "at the second operation")

	ctx, cancel = context.WithCancel(context.Background())
	go endRound(ctx, cancel, time.Millisecond, 1, 10*time.Millisecond, &recorder{})
	done(ctx, "no operation, 10 ms to wait")

	ctx, cancel = context.WithCancel(context.Background())
	go endRound(ctx, cancel, time.Millisecond, 0, time.Hour, &recorder{})
	done(ctx, "without MinOps")
}
