package sqllock

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/internal/testenv"
	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/locktest"
)

// TestTwoGateways: two Lockers with separate pools (two gateway instances)
// contend for one key with many goroutines each, with short TTLs mixed in
// so that expiry takeovers and handoffs interleave with releases. A counter
// incremented by a separate load and store inside the lock must equal the
// number of grants, and the history checker must find no overlap and no
// token regression.
func TestTwoGateways(t *testing.T) {
	t.Parallel()
	p := shared(t)
	// The second Locker pings its listening connection after 20 ms of
	// silence: the timed waits must not break the connection.
	ls := []*Locker{newLocker(t, p, nil), newLocker(t, p, func(c *Config) { c.ListenPing = 20 * time.Millisecond })}
	const goroutines, cycles = 12, 40
	key := "two-gateways"
	var counter, grants atomic.Int64
	var rec locktest.Recorder
	ctx := bg(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, goroutines*cycles)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l := ls[g%2]
			owner := fmt.Sprintf("g%d", g)
			for i := range cycles {
				var lease *lock.Lease
				var err error
				if i%5 == 4 {
					// TryAcquire until granted: the path that bypasses
					// the gate.
					for {
						lease, err = l.TryAcquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: owner})
						if !errors.Is(err, lock.ErrNotAcquired) {
							break
						}
						runtime.Gosched()
					}
				} else {
					lease, err = l.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute, Owner: owner})
				}
				if err != nil {
					errs <- fmt.Errorf("%s cycle %d: %w", owner, i, err)
					return
				}
				start := time.Now()
				v := counter.Load()
				runtime.Gosched()
				counter.Store(v + 1)
				grants.Add(1)
				end := time.Now()
				if d := lease.Deadline(); d.Before(end) {
					end = d
				}
				rec.Add(locktest.Hold{Key: key, Holder: owner, Token: lease.Token, Start: start, End: end})
				if err := l.Release(ctx, lease); err != nil {
					errs <- fmt.Errorf("%s cycle %d: Release: %w", owner, i, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if want := int64(goroutines * cycles); grants.Load() != want || counter.Load() != want {
		t.Errorf("counter %d after %d grants, want %d: mutual exclusion violated or grants lost", counter.Load(), grants.Load(), want)
	}
	for _, v := range locktest.CheckHistory(rec.Holds()) {
		t.Errorf("history: %v", v)
	}
	if n := ls[1].stats.reconnects.Load(); n != 0 {
		t.Errorf("the listening connection was replaced %d times without a fault", n)
	}
	t.Logf("handoffs %d, attempts %d (held %d)", ls[0].stats.handoffs.Load()+ls[1].stats.handoffs.Load(),
		ls[0].stats.attempts.Load()+ls[1].stats.attempts.Load(), ls[0].stats.held.Load()+ls[1].stats.held.Load())
}

// TestLocalHandoffsAreBounded: a Locker whose callers keep handing a key to
// each other must still let another Locker's waiter in.
func TestLocalHandoffsAreBounded(t *testing.T) {
	t.Parallel()
	p := shared(t)
	busy, other := newLocker(t, p, nil), newLocker(t, p, nil)
	key := "bounded"
	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	var wg sync.WaitGroup
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				lease, err := busy.Acquire(ctx, key, lock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					return
				}
				busy.Release(context.Background(), lease)
			}
		}()
	}
	eventually(t, 30*time.Second, "local handoffs start", func() bool { return busy.stats.handoffs.Load() > 0 })
	// The holders' TTL is a minute: only a release lets the waiter in.
	lease, err := other.Acquire(bg(t, 20*time.Second), key, lock.AcquireOptions{TTL: time.Minute, Owner: "other"})
	if err != nil {
		t.Fatalf("another Locker's waiter starved by local handoffs: %v", err)
	}
	stop()
	other.Release(bg(t, time.Minute), lease)
	wg.Wait()
}

// TestServerRestart: locks and tokens survive a restart of the server
// (clean, and after SIGKILL with crash recovery); tokens issued afterwards
// exceed every earlier one; the Lockers recover (pool and listening
// connection), and a waiter blocked across the restart is granted, through
// the release notification, once the holder releases.
func TestServerRestart(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	for _, tc := range []struct {
		name  string
		fault func()
	}{
		{"Restart", p.Restart},
		{"KillRestart", func() { p.Kill(); p.Restart() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, b := newLocker(t, p, nil), newLocker(t, p, nil)
			key := "restart." + tc.name
			var top lock.Token
			for i := range 5 { // some history of tokens
				lease, err := a.Acquire(bg(t, time.Minute), fmt.Sprintf("%s.%d", key, i), lock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					t.Fatal(err)
				}
				top = max(top, lease.Token)
			}
			held, err := a.Acquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: time.Minute, Owner: "holder", Value: []byte("v")})
			if err != nil {
				t.Fatal(err)
			}
			top = max(top, held.Token)
			waiter := make(chan *lock.Lease, 1)
			go func() {
				lease, err := b.Acquire(bg(t, 2*time.Minute), key, lock.AcquireOptions{TTL: time.Minute, Owner: "waiter"})
				if err != nil {
					t.Errorf("waiter: %v", err)
				}
				waiter <- lease
			}()
			eventually(t, 30*time.Second, "waiter blocked at the database", func() bool { return b.stats.held.Load() > 0 })
			reconnects := b.stats.reconnects.Load()

			tc.fault()

			recovered(t, a, key)
			recovered(t, b, key)
			info, err := b.Inspect(bg(t, time.Minute), key)
			if err != nil {
				t.Fatalf("Inspect after the restart: %v", err)
			}
			if info.Token != held.Token || info.Owner != "holder" || string(info.Value) != "v" {
				t.Errorf("after the restart the row is %+v, want token %d of holder", info, held.Token)
			}
			eventually(t, 30*time.Second, "listening connection re-established", func() bool {
				return b.stats.reconnects.Load() > reconnects
			})
			select {
			case l := <-waiter:
				t.Fatalf("waiter granted while the key was held: %+v", l)
			default:
			}
			if err := a.Release(bg(t, time.Minute), held); err != nil {
				t.Fatalf("Release after the restart: %v", err)
			}
			// The holder's TTL is a minute: only the notification can
			// wake the waiter this early.
			select {
			case lease := <-waiter:
				if lease == nil {
					t.FailNow()
				}
				if lease.Token <= top {
					t.Errorf("token after the restart %d, want > %d", lease.Token, top)
				}
				if err := b.Release(bg(t, time.Minute), lease); err != nil {
					t.Error(err)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("waiter blocked across the restart not granted within 20s of the release")
			}
			fresh, err := a.TryAcquire(bg(t, time.Minute), key+".fresh", lock.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if fresh.Token <= top {
				t.Errorf("fresh token %d, want > %d", fresh.Token, top)
			}
		})
	}
}

// TestServerDown: with the server stopped, calls fail with errors matching
// lock.ErrUnavailable (not hang); Acquire keeps retrying until the server
// is back.
func TestServerDown(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	l := newLocker(t, p, func(c *Config) { c.QueryTimeout = 2 * time.Second })
	p.Stop()
	_, err := l.TryAcquire(bg(t, time.Minute), "down", lock.AcquireOptions{TTL: time.Minute})
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("TryAcquire with the server down: %v, want ErrUnavailable", err)
	}
	_, err = l.Inspect(bg(t, time.Minute), "down")
	if !errors.Is(err, lock.ErrUnavailable) {
		t.Fatalf("Inspect with the server down: %v, want ErrUnavailable", err)
	}
	got := make(chan error, 1)
	go func() {
		lease, err := l.Acquire(bg(t, time.Minute), "down", lock.AcquireOptions{TTL: time.Minute})
		if err == nil {
			err = l.Release(bg(t, time.Minute), lease)
		}
		got <- err
	}()
	p.Restart()
	if err := <-got; err != nil {
		t.Fatalf("Acquire across the outage: %v", err)
	}
	if _, err := New(bg(t, time.Minute), DefaultConfig("postgres://postgres@127.0.0.1:1/postgres?sslmode=disable&connect_timeout=2")); !errors.Is(err, lock.ErrUnavailable) {
		t.Errorf("New against a closed port: %v, want ErrUnavailable", err)
	}
}

// TestKilledMidAcquire: the backend executing an acquire is terminated
// (pg_terminate_backend) while the statement waits on a row lock. The
// caller gets a clear error, and no ghost lock is left.
func TestKilledMidAcquire(t *testing.T) {
	t.Parallel()
	p := shared(t)
	l := newLocker(t, p, func(c *Config) { c.Retry = lock.NoRetry(); c.Table = "killed_locks" })
	blocker, killer := admin(t, p), admin(t, p)
	for _, tc := range []struct {
		name    string
		acquire func(context.Context, string, lock.AcquireOptions) (*lock.Lease, error)
	}{
		{"TryAcquire", l.TryAcquire},
		{"Acquire", l.Acquire},
	} {
		t.Run(tc.name, func(t *testing.T) {
			key := "killed." + tc.name
			// An uncommitted insert of the key: the acquire's INSERT
			// waits for this transaction to end.
			tx, err := blocker.Begin(bg(t, time.Minute))
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback(context.Background())
			if _, err := tx.Exec(bg(t, time.Minute), `INSERT INTO `+l.names.table+
				` (key, owner, handle, token, acquired_at, expires_at) VALUES ($1, 'admin', 'x', 0, now(), now() + interval '1 hour')`, key); err != nil {
				t.Fatal(err)
			}
			got := make(chan error, 1)
			go func() {
				lease, err := tc.acquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: time.Minute})
				if lease != nil {
					err = fmt.Errorf("granted token %d while the row was locked", lease.Token)
				}
				got <- err
			}()
			var pid int32
			eventually(t, 30*time.Second, "acquire waiting on the row lock", func() bool {
				err := killer.QueryRow(bg(t, time.Minute), `SELECT pid FROM pg_stat_activity
					WHERE wait_event_type = 'Lock' AND query LIKE '%INSERT INTO "killed_locks"%' AND pid <> $1`, blocker.PgConn().PID()).Scan(&pid)
				return err == nil
			})
			var ok bool
			if err := killer.QueryRow(bg(t, time.Minute), "SELECT pg_terminate_backend($1)", pid).Scan(&ok); err != nil || !ok {
				t.Fatalf("pg_terminate_backend(%d): %v %v", pid, ok, err)
			}
			err = <-got
			if !errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), "terminating connection") {
				t.Errorf("acquire killed mid-statement: %v, want ErrUnavailable naming the termination", err)
			}
			t.Logf("error: %v", err)
			if err := tx.Rollback(bg(t, time.Minute)); err != nil {
				t.Fatal(err)
			}
			if _, err := l.Inspect(bg(t, time.Minute), key); !errors.Is(err, lock.ErrNotFound) {
				t.Errorf("Inspect after the killed acquire: %v, want ErrNotFound (ghost lock?)", err)
			}
			var rows int
			if err := killer.QueryRow(bg(t, time.Minute), `SELECT count(*) FROM `+l.names.table+` WHERE key = $1`, key).Scan(&rows); err != nil || rows != 0 {
				t.Errorf("%d rows for the key after the killed acquire (%v), want 0", rows, err)
			}
			lease, err := l.TryAcquire(bg(t, time.Minute), key, lock.AcquireOptions{TTL: time.Minute})
			if err != nil {
				t.Fatalf("TryAcquire after the killed acquire: %v", err)
			}
			l.Release(bg(t, time.Minute), lease)
		})
	}
}

// TestSchema: creating the schema is idempotent and safe when Lockers start
// together; schema-qualified and odd table names are quoted; names that
// PostgreSQL cannot hold faithfully are rejected with a message naming
// Config.Table.
func TestSchema(t *testing.T) {
	t.Parallel()
	p := shared(t)
	adm := admin(t, p)
	if _, err := adm.Exec(bg(t, time.Minute), `CREATE TABLE canary (x int)`); err != nil {
		t.Fatal(err)
	}
	t.Run("Concurrent", func(t *testing.T) {
		var wg sync.WaitGroup
		for range 6 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				l, err := New(bg(t, time.Minute), Config{URL: p.URL, Table: "concurrent.locks"})
				if err != nil {
					t.Errorf("concurrent New: %v", err)
					return
				}
				l.Close()
			}()
		}
		wg.Wait()
		l := newLocker(t, p, func(c *Config) { c.Table = "concurrent.locks" }) // and once more
		lease, err := l.TryAcquire(bg(t, time.Minute), "k", lock.AcquireOptions{TTL: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		var n int
		if err := adm.QueryRow(bg(t, time.Minute), `SELECT count(*) FROM concurrent.locks WHERE token = $1`, int64(lease.Token)).Scan(&n); err != nil || n != 1 {
			t.Errorf("row in concurrent.locks: %d, %v", n, err)
		}
	})
	for _, name := range []string{
		`locks"; DROP TABLE canary; --`,
		`odd "schema".Locks-'Table'`,
		`ünïcödé`,
		strings.Repeat("s", maxIdent) + "." + strings.Repeat("t", maxIdent-len(seqSuffix)),
	} {
		t.Run("Name", func(t *testing.T) {
			l := newLocker(t, p, func(c *Config) { c.Table = name })
			lease, err := l.Acquire(bg(t, time.Minute), "k", lock.AcquireOptions{TTL: time.Minute, Value: []byte("v")})
			if err != nil {
				t.Fatalf("Acquire with table %q: %v", name, err)
			}
			if info, err := l.Inspect(bg(t, time.Minute), "k"); err != nil || info.Token != lease.Token {
				t.Errorf("Inspect with table %q: %+v, %v", name, info, err)
			}
			if err := l.Release(bg(t, time.Minute), lease); err != nil {
				t.Error(err)
			}
			var exists bool
			if err := adm.QueryRow(bg(t, time.Minute), `SELECT to_regclass($1) IS NOT NULL`, l.names.table).Scan(&exists); err != nil || !exists {
				t.Errorf("table %s not found (%v)", l.names.table, err)
			}
		})
	}
	if _, err := adm.Exec(bg(t, time.Minute), `SELECT * FROM canary`); err != nil {
		t.Errorf("the canary table is gone: a table name was not quoted: %v", err)
	}
	for _, name := range []string{".locks", "locks.", "a.b.c", "lo\x00cks", "lo\ncks",
		strings.Repeat("t", maxIdent-len(seqSuffix)+1), strings.Repeat("s", maxIdent+1) + ".t"} {
		_, err := New(bg(t, time.Minute), Config{URL: p.URL, Table: name})
		if err == nil || !strings.Contains(err.Error(), "Config.Table") {
			t.Errorf("New with table %q: %v, want an error naming Config.Table", name, err)
		}
	}
}

// TestSweeper: expired rows are deleted in the background.
func TestSweeper(t *testing.T) {
	t.Parallel()
	p := shared(t)
	l := newLocker(t, p, func(c *Config) { c.SweepInterval = 50 * time.Millisecond; c.Table = "sweep_locks" })
	adm := admin(t, p)
	for i := range 3 {
		if _, err := l.TryAcquire(bg(t, time.Minute), fmt.Sprintf("swept.%d", i), lock.AcquireOptions{TTL: 20 * time.Millisecond}); err != nil {
			t.Fatal(err)
		}
	}
	live, err := l.TryAcquire(bg(t, time.Minute), "live", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "expired rows swept", func() bool {
		var n int
		err := adm.QueryRow(bg(t, time.Minute), `SELECT count(*) FROM `+l.names.table).Scan(&n)
		return err == nil && n == 1
	})
	if info, err := l.Inspect(bg(t, time.Minute), "live"); err != nil || info.Token != live.Token {
		t.Errorf("the live lock after sweeping: %+v, %v", info, err)
	}
}

// TestValidate: configuration errors name the field.
func TestValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{}, "Config.URL"},
		{Config{URL: "x", PoolSize: -1}, "Config.PoolSize"},
		{Config{URL: "x", QueryTimeout: -1}, "Config.QueryTimeout"},
		{Config{URL: "x", DriftFactor: 0.7}, "Config.DriftFactor"},
		{Config{URL: "x", ClientID: strings.Repeat("c", lock.MaxOwnerLen+1)}, "Config.ClientID"},
		{Config{URL: "x", Table: "a.b.c"}, "Config.Table"},
	} {
		if err := tc.cfg.Validate(); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want an error naming %s", tc.cfg, err, tc.want)
		}
	}
	if err := DefaultConfig("postgres://localhost/db").Validate(); err != nil {
		t.Errorf("DefaultConfig: %v", err)
	}
}

// TestServerPaused: a server that stops answering (SIGSTOP) without closing
// connections is noticed by the listener's ping; after it resumes, the
// listening connection is replaced and a waiter that waited through the
// pause is woken by the holder's release.
func TestServerPaused(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	a := newLocker(t, p, nil)
	b := newLocker(t, p, func(c *Config) {
		c.ListenPing = 100 * time.Millisecond
		c.QueryTimeout = 500 * time.Millisecond
	})
	held, err := a.Acquire(bg(t, time.Minute), "paused", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	waiter := make(chan error, 1)
	go func() {
		lease, err := b.Acquire(bg(t, time.Minute), "paused", lock.AcquireOptions{TTL: time.Minute})
		if err == nil {
			err = b.Release(bg(t, time.Minute), lease)
		}
		waiter <- err
	}()
	eventually(t, 30*time.Second, "waiter blocked at the database", func() bool { return b.stats.held.Load() > 0 })
	p.Pause()
	// The ping times out after ListenPing + QueryTimeout; reconnecting
	// fails until the server resumes. Give it several ping rounds.
	time.Sleep(2 * time.Second) // the fault's duration, not a synchronisation
	p.Resume()
	eventually(t, 30*time.Second, "listening connection replaced", func() bool { return b.stats.reconnects.Load() > 0 })
	recovered(t, a, "paused")
	if err := a.Release(bg(t, time.Minute), held); err != nil {
		t.Fatalf("Release after the pause: %v", err)
	}
	select {
	case err := <-waiter:
		if err != nil {
			t.Fatalf("waiter: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("waiter not granted within 20s of the release (holder TTL 1 min)")
	}
}

// TestQueryTimeoutPaused: with the server frozen (SIGSTOP) and callers
// whose contexts never end, every call still returns ErrUnavailable within
// a few QueryTimeouts: a statement on a pooled connection through its
// socket deadline, taking a pooled connection idle for over a second
// through one bounded ping (not one per idle connection), and a new
// connection through the connect timeout. A release cut off by the
// deadline reports an unknown outcome.
func TestQueryTimeoutPaused(t *testing.T) {
	t.Parallel()
	p := testenv.StartPostgres(t)
	const timeout = 500 * time.Millisecond
	l := newLocker(t, p, func(c *Config) { c.QueryTimeout = timeout; c.Retry = lock.NoRetry() })
	ctx := context.Background()
	held, err := l.Acquire(ctx, "paused.held", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// Idle pooled connections: without a bound per take, pgxpool pings
	// each in turn, every ping waiting out its timeout.
	var conns []*pgxpool.Conn
	for range 8 {
		c, err := l.pool.Acquire(ctx)
		if err != nil {
			t.Fatal(err)
		}
		conns = append(conns, c)
	}
	for _, c := range conns {
		c.Release()
	}
	check := func(what string, f func() error, want string) {
		t.Helper()
		start := time.Now()
		err := f()
		elapsed := time.Since(start)
		if !errors.Is(err, lock.ErrUnavailable) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s on a paused server: %v, want ErrUnavailable (%s)", what, err, want)
		}
		if elapsed > 4*timeout {
			t.Errorf("%s on a paused server took %v, want at most 4 × QueryTimeout (%v)", what, elapsed, timeout)
		}
		t.Logf("%s: %v after %v", what, err, elapsed.Round(time.Millisecond))
	}
	p.Pause()
	resumed := false
	defer func() {
		if !resumed {
			p.Resume()
		}
	}()
	// The most recently used connection: no ping, the socket deadline.
	check("Release", func() error { return l.Release(ctx, held) }, "outcome unknown")
	// The rest have been idle for over a second: one ping, then a
	// connection unchecked, cut off by its deadline.
	time.Sleep(1100 * time.Millisecond) // the idle time that makes pgxpool ping, not a synchronisation
	check("Inspect", func() error { _, err := l.Inspect(ctx, "paused.other"); return err }, "inspect")
	// No connection left: a new one, bounded by the connect timeout.
	l.pool.Reset()
	check("TryAcquire", func() error {
		_, err := l.TryAcquire(ctx, "paused.other", lock.AcquireOptions{TTL: time.Minute})
		return err
	}, "acquire")
	p.Resume()
	resumed = true
	recovered(t, l, "paused.other")
}
