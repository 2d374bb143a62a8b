package demo

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"
)

// TestDemo runs a short demo: it must see no overlapping holds, reject the
// paused client's late write, and survive the leader's stop.
func TestDemo(t *testing.T) {
	var out bytes.Buffer
	sum, err := Run(context.Background(), Config{Duration: 8 * time.Second, Clients: 4}, &out)
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, out.String())
	}
	t.Logf("summary %+v\n%s", sum, out.String())
	if sum.Overlaps != 0 || sum.TokenRegresses != 0 {
		t.Errorf("overlaps %d, token regressions %d; want 0", sum.Overlaps, sum.TokenRegresses)
	}
	if sum.StaleRejected < 1 || !strings.Contains(sum.LateWriteStatus, "rejected") {
		t.Errorf("stale writes rejected %d (%s); want the paused client's late write rejected", sum.StaleRejected, sum.LateWriteStatus)
	}
	if sum.Grants < 10 || sum.Writes < 10 || sum.NewLeader == "" || sum.NewLeader == sum.OldLeader {
		t.Errorf("grants %d, writes %d, leader %s → %s", sum.Grants, sum.Writes, sum.OldLeader, sum.NewLeader)
	}
}
