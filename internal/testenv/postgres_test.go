package testenv

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func pgConnect(t *testing.T, url string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, url)
	if err != nil {
		t.Fatalf("connect %s: %v", url, err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func pgExec(t *testing.T, c *pgx.Conn, sql string, args ...any) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := c.Exec(ctx, sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func pgValues(t *testing.T, url string) []string {
	t.Helper()
	c := pgConnect(t, url)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := c.Query(ctx, "SELECT v FROM kv ORDER BY id")
	if err != nil {
		t.Fatalf("SELECT: %v", err)
	}
	vs, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatalf("SELECT: %v", err)
	}
	return vs
}

func requireValues(t *testing.T, url string, want ...string) {
	t.Helper()
	if got := pgValues(t, url); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("rows = %q, want %q", got, want)
	}
}

func TestPostgres(t *testing.T) {
	t.Parallel()
	pg := StartPostgres(t)
	if want := fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", pg.Port); pg.URL != want {
		t.Errorf("URL = %q, want %q", pg.URL, want)
	}
	if _, err := os.Stat(filepath.Join(pg.DataDir, "PG_VERSION")); err != nil {
		t.Errorf("DataDir %q is not a cluster: %v", pg.DataDir, err)
	}
	requireAlive(t, "postmaster", pg.PID())

	c := pgConnect(t, pg.URL)
	pgExec(t, c, "CREATE TABLE kv (id int PRIMARY KEY, v text NOT NULL)")
	pgExec(t, c, "INSERT INTO kv VALUES (1, 'one')")
	requireValues(t, pg.URL, "one")

	t.Run("PauseResume", func(t *testing.T) {
		pg.Pause()
		for _, pid := range append([]int{pg.PID()}, descendants(pg.PID())...) {
			if st, _ := procStat(pid); st.state != 'T' && st.state != 'Z' {
				t.Errorf("process %d in state %c after Pause, want T", pid, st.state)
			}
		}
		// The connection is open, so this exercises a backend, not just
		// the postmaster: the whole process group must be stopped.
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		defer cancel()
		var one int
		if err := c.QueryRow(ctx, "SELECT 1").Scan(&one); err == nil {
			t.Errorf("query on a paused server succeeded")
		}
		pg.Resume()
		requireValues(t, pg.URL, "one")
	})

	t.Run("Restart", func(t *testing.T) {
		url, pid := pg.URL, pg.PID()
		pg.Restart() // stops the running server first
		requireGone(t, "old postmaster", pid)
		requireAlive(t, "new postmaster", pg.PID())
		if pg.URL != url {
			t.Errorf("URL after Restart = %q, want %q", pg.URL, url)
		}
		requireValues(t, url, "one")
	})

	t.Run("KillRestart", func(t *testing.T) {
		c := pgConnect(t, pg.URL)
		pgExec(t, c, "INSERT INTO kv VALUES (2, 'two')")
		pid := pg.PID()
		workers := requireWorkers(t, pid) // backends, checkpointer, ...
		pg.Kill()
		requireGone(t, "postmaster after Kill", pid)
		requireDead(t, "postgres workers after Kill", workers)
		requireRefused(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
		pg.Restart() // crash recovery keeps the committed row
		requireValues(t, pg.URL, "one", "two")
	})

	t.Run("Stop", func(t *testing.T) {
		c := pgConnect(t, pg.URL) // an open session must not delay Stop
		pgExec(t, c, "SELECT 1")
		pid := pg.PID()
		workers := requireWorkers(t, pid)
		start := time.Now()
		pg.Stop()
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Stop took %v", d)
		}
		requireGone(t, "postmaster after Stop", pid)
		requireDead(t, "postgres workers after Stop", workers)
		requireRefused(t, fmt.Sprintf("127.0.0.1:%d", pg.Port))
		pg.Stop() // idempotent
	})
}

// TestPostgresCleanup proves that the t.Cleanup registered by StartPostgres
// stops the server (and removes its data directory) when the subtest ends.
func TestPostgresCleanup(t *testing.T) {
	t.Parallel()
	var pid, port int
	var dataDir string
	var workers []int
	t.Run("start", func(t *testing.T) {
		pg := StartPostgres(t)
		pid, port, dataDir = pg.PID(), pg.Port, pg.DataDir
		requireAlive(t, "postmaster", pid)
		workers = requireWorkers(t, pid)
		pg.Pause() // cleanup must cope with a paused server too
	})
	requireGone(t, "postmaster after subtest", pid)
	requireDead(t, "postgres workers after subtest", workers)
	requireRefused(t, fmt.Sprintf("127.0.0.1:%d", port))
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Errorf("data dir %s still exists (stat: %v)", dataDir, err)
	}
}
