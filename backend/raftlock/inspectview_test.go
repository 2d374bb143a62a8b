package raftlock

import (
	"context"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
)

// TestInspectReadsOneInstant: Inspect judges the lock table by the clock
// of the instant it read it, before it confirms it leads. A leader stopped
// between the read and the confirmation (a paused process) resumes with
// its clock far ahead; meanwhile a successor has extended every live
// lease. Judging the old table by the new clock showed a held key as free
// (a lease-holder then released it successfully, after the read said no
// one held it). Here the stop is a jump of the leader's clock by a
// minute, between the read and the confirmation.
func TestInspectReadsOneInstant(t *testing.T) {
	c := startCluster(t, 3, func(cfg *Config) { cfg.FaultInjection = true })
	ld := leader(t, c)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	lease, err := ld.Acquire(ctx, "paused/inspect", lock.AcquireOptions{TTL: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	jumped := false
	testHookInspectRead = func() {
		jumped = true
		if err := ld.Faults().SkewClock(time.Minute); err != nil {
			t.Error(err)
		}
	}
	info, err := ld.Inspect(ctx, "paused/inspect")
	testHookInspectRead = nil
	if err := ld.Faults().SkewClock(0); err != nil {
		t.Fatal(err)
	}
	if !jumped {
		t.Fatal("Inspect did not run the hook between its read and its leadership check")
	}
	if err != nil {
		t.Fatalf("Inspect of a key held for another 10 s at the read: %v (the table was judged by a clock of after the read)", err)
	}
	if info.Token != lease.Token {
		t.Fatalf("Inspect shows token %d, the holder has %d", info.Token, lease.Token)
	}
	if err := ld.Release(ctx, lease); err != nil {
		t.Fatal(err)
	}
}
