package sqllock

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
)

// newLocker returns a Locker on p, closed when t ends.
func newLocker(t testing.TB, p *testenv.Postgres, edit func(*Config)) *Locker {
	t.Helper()
	cfg := DefaultConfig(p.URL)
	if edit != nil {
		edit(&cfg)
	}
	l, err := New(bg(t, time.Minute), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// admin returns a plain connection to p, closed when t ends.
func admin(t testing.TB, p *testenv.Postgres) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(bg(t, time.Minute), p.URL)
	if err != nil {
		t.Fatalf("admin connection: %v", err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func bg(t testing.TB, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

// eventually retries f until it returns true or d passes. It is for
// observable events with no notification to wait on (a server-side state,
// a background goroutine's progress); the pause only paces the checks.
func eventually(t testing.TB, d time.Duration, what string, f func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !f() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, d)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// recovered waits until l answers again (Inspect succeeds or reports the
// key free) after a server fault.
func recovered(t testing.TB, l *Locker, key string) {
	t.Helper()
	eventually(t, 30*time.Second, "locker answers after the fault", func() bool {
		_, err := l.Inspect(bg(t, 10*time.Second), key)
		return err == nil || errors.Is(err, lock.ErrNotFound)
	})
}
