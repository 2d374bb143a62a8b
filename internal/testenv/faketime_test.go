package testenv

import (
	"context"
	"testing"
	"time"
)

// TestFakeClockPostgres: a PostgreSQL started under a FakeClock sees its
// wall clock jump forward, and back, within a few seconds of Jump and Set.
func TestFakeClockPostgres(t *testing.T) {
	fc := NewFakeClock(t)
	p := StartPostgresWith(t, PostgresOptions{Env: fc.Env()})
	c := pgConnect(t, p.URL)
	skew := func() time.Duration {
		var now time.Time
		if err := c.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now); err != nil {
			t.Fatal(err)
		}
		return time.Until(now)
	}
	await := func(want func(time.Duration) bool, what string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			d := skew()
			if want(d) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the server's clock is %v off", what, d)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	await(func(d time.Duration) bool { return d.Abs() < 5*time.Second }, "at offset 0")
	if err := fc.Jump(time.Hour); err != nil {
		t.Fatal(err)
	}
	await(func(d time.Duration) bool { return d > 59*time.Minute && d < 61*time.Minute }, "after a jump of 1h")
	if err := fc.Set(0); err != nil {
		t.Fatal(err)
	}
	await(func(d time.Duration) bool { return d.Abs() < 5*time.Second }, "after the reset")
}
