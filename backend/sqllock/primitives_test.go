package sqllock

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/kit"
)

// TestMigrateExistingTable: a table of the first version (no contended, no
// lock_delay) with a live lock in it gains the columns at New, without
// losing the lock, and then offers lock-delay. A start on a table that has
// every column alters nothing: it succeeds while another transaction
// holds a row lock on the table, which an ALTER TABLE (ACCESS EXCLUSIVE)
// would wait for; on the old table the same start does wait (the check
// can fail).
func TestMigrateExistingTable(t *testing.T) {
	t.Parallel()
	p := shared(t)
	db := admin(t, p)
	ctx := bg(t, time.Minute)
	for _, q := range []string{
		`DROP TABLE IF EXISTS old_locks, old_locks_holders, old_locks_queue`, // (a second run: -count)
		`DROP SEQUENCE IF EXISTS old_locks_token_seq`,
		`CREATE SEQUENCE old_locks_token_seq AS bigint MINVALUE 1`,
		`CREATE TABLE old_locks (key text PRIMARY KEY, owner text NOT NULL, handle text NOT NULL,
			token bigint NOT NULL, value bytea, acquired_at timestamptz NOT NULL, expires_at timestamptz NOT NULL)`,
		`INSERT INTO old_locks VALUES ('held', 'old-owner', 'h', nextval('old_locks_token_seq'), NULL, now(), now() + interval '1 hour')`,
	} {
		if _, err := db.Exec(ctx, q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	table := func(c *Config) { c.Table = "old_locks" }

	// A row lock held elsewhere: an ALTER must wait for it.
	tx, err := db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, `SELECT 1 FROM old_locks WHERE key = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 2*time.Second)
	cfg := DefaultConfig(p.URL)
	table(&cfg)
	if l, err := New(short, cfg); err == nil {
		l.Close()
		t.Errorf("New on the old table did not wait for the row lock: it did not alter the table?")
	}
	cancel()
	tx.Rollback(ctx)

	l := newLocker(t, p, table)
	var cols int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM pg_attribute WHERE attrelid = 'old_locks'::regclass
		AND attname IN ('contended', 'lock_delay', 'mode', 'permits') AND NOT attisdropped`).Scan(&cols); err != nil || cols != 4 {
		t.Fatalf("%d of the 4 new columns after New (%v)", cols, err)
	}
	info, err := l.Inspect(ctx, "held")
	if err != nil || info.Owner != "old-owner" {
		t.Fatalf("the old lock after the migration: %+v, %v", info, err)
	}
	if _, err := l.TryAcquire(ctx, "held", lock.AcquireOptions{TTL: time.Second}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("TryAcquire of the old lock: %v, want ErrNotAcquired", err)
	}

	// Every column present: a second start alters nothing.
	tx, err = db.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, `SELECT 1 FROM old_locks WHERE key = 'held' FOR UPDATE`); err != nil {
		t.Fatal(err)
	}
	short, cancel = context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	l2, err := New(short, cfg)
	if err != nil {
		t.Fatalf("New on a migrated table while a row is locked: %v (an ALTER TABLE waited?)", err)
	}
	l2.Close()
}

// TestLockDelayCorners: a release after expiry does not end the delay
// (ErrNotHeld, the key still refused with a *lock.DelayedError naming the
// delay's end), the sweeper keeps a row within its delay and deletes one
// past it, and a local handoff gives the new grant its own lock-delay, not
// the old one's.
func TestLockDelayCorners(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a := newLocker(t, p, func(c *Config) { c.Table = "delay_locks"; c.SweepInterval = -1 })
	b := newLocker(t, p, func(c *Config) { c.Table = "delay_locks"; c.SweepInterval = -1 })
	db := admin(t, p)
	ctx := bg(t, time.Minute)
	const delay = 30 * time.Second // far longer than the test's steps
	ttl := 300 * time.Millisecond
	run := lock.NewHandle()[:8] // keys of their own in every run (-count)

	t.Run("LateRelease", func(t *testing.T) {
		lease, err := a.Acquire(ctx, run+"late", lock.AcquireOptions{TTL: ttl, LockDelay: delay})
		if err != nil {
			t.Fatal(err)
		}
		<-lease.Done()
		// Done closes before the database's expiry (drift allowance):
		// wait until the row has expired there.
		eventually(t, 10*time.Second, "row expired", func() bool {
			_, err := a.Inspect(ctx, run+"late")
			return errors.Is(err, lock.ErrNotFound)
		})
		if err := a.Release(ctx, kit.NewLease(kit.Grant{Key: lease.Key, Token: lease.Token, Handle: lease.Handle, TTL: ttl, Sent: time.Now()})); !errors.Is(err, lock.ErrNotHeld) {
			t.Errorf("release after expiry: %v, want ErrNotHeld", err)
		}
		_, err = b.TryAcquire(ctx, run+"late", lock.AcquireOptions{TTL: time.Second})
		var de *lock.DelayedError
		if !errors.As(err, &de) || !errors.Is(err, lock.ErrNotAcquired) {
			t.Fatalf("TryAcquire within the delay after a late release: %v, want a *lock.DelayedError", err)
		}
		if left := time.Until(de.Until); left < delay/2 || left > delay {
			t.Errorf("DelayedError.Until is %v away, want about %v", left, delay)
		}
		// TryAcquireAll too.
		if _, err := b.TryAcquireAll(ctx, []string{run + "late-other", run + "late"}, lock.AcquireOptions{TTL: time.Second}); !errors.As(err, &de) || de.Key != run+"late" {
			t.Errorf("TryAcquireAll with a key in its delay: %v, want a *lock.DelayedError for it", err)
		}
		var n int
		if err := db.QueryRow(ctx, `SELECT count(*) FROM delay_locks WHERE key = $1`, run+"late-other").Scan(&n); err != nil || n != 0 {
			t.Errorf("%d rows of the other key after a refused TryAcquireAll (%v), want 0", n, err)
		}
	})

	t.Run("Sweep", func(t *testing.T) {
		for _, k := range []string{run + "sweep-delayed", run + "sweep-plain"} {
			d := delay
			if k == run+"sweep-plain" {
				d = 0
			}
			if _, err := a.TryAcquire(ctx, k, lock.AcquireOptions{TTL: ttl, LockDelay: d}); err != nil {
				t.Fatal(err)
			}
		}
		eventually(t, 10*time.Second, "rows expired", func() bool {
			var n int
			db.QueryRow(ctx, `SELECT count(*) FROM delay_locks WHERE key LIKE $1 AND expires_at < clock_timestamp()`, run+"sweep-%").Scan(&n)
			return n == 2
		})
		if _, err := db.Exec(ctx, a.q.sweep); err != nil {
			t.Fatal(err)
		}
		rows := map[string]bool{}
		r, err := db.Query(ctx, `SELECT key FROM delay_locks WHERE key LIKE $1`, run+"sweep-%")
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var k string
			r.Scan(&k)
			rows[k[len(run):]] = true
		}
		r.Close()
		if !rows["sweep-delayed"] || rows["sweep-plain"] {
			t.Errorf("rows after a sweep: %v, want only sweep-delayed (within its delay)", rows)
		}
	})

	t.Run("Handoff", func(t *testing.T) {
		for _, tc := range []struct {
			name               string
			first, second      time.Duration // lock-delays of the holder and the local waiter
			refusedAfterExpiry bool
		}{
			{"DelayedToPlain", delay, 0, false},
			{"PlainToDelayed", 0, delay, true},
		} {
			t.Run(tc.name, func(t *testing.T) {
				k := run + "handoff-" + tc.name
				first, err := a.Acquire(ctx, k, lock.AcquireOptions{TTL: time.Minute, LockDelay: tc.first})
				if err != nil {
					t.Fatal(err)
				}
				got := make(chan *lock.Lease, 1)
				go func() {
					l, err := a.Acquire(ctx, k, lock.AcquireOptions{TTL: ttl, LockDelay: tc.second})
					if err != nil {
						t.Error(err)
					}
					got <- l
				}()
				eventually(t, 10*time.Second, "the local waiter queued", func() bool { return a.gate.Queued(k) == 1 })
				handoffs := a.stats.handoffs.Load()
				if err := a.Release(ctx, first); err != nil {
					t.Fatal(err)
				}
				second := <-got
				if second == nil {
					t.FailNow()
				}
				if a.stats.handoffs.Load() != handoffs+1 {
					t.Fatalf("the lease was not handed over in process")
				}
				<-second.Done()
				eventually(t, 10*time.Second, "row expired", func() bool {
					_, err := a.Inspect(ctx, k)
					return errors.Is(err, lock.ErrNotFound)
				})
				l, err := b.TryAcquire(ctx, k, lock.AcquireOptions{TTL: time.Second})
				switch {
				case tc.refusedAfterExpiry && !errors.As(err, new(*lock.DelayedError)):
					t.Errorf("TryAcquire after the handed-over grant expired: %v, want its lock-delay", err)
				case !tc.refusedAfterExpiry && err != nil:
					t.Errorf("TryAcquire after the handed-over grant (no delay) expired: %v, want a grant", err)
				}
				if l != nil {
					b.Release(ctx, l)
				}
			})
		}
	})
}

// TestAcquireAllManyLockers: four Lockers acquire overlapping three-key
// subsets of five keys, each listing them in its own order, over and over:
// nobody ever holds a key another holds (in-process counters), no acquire
// fails (a deadlock would surface as SQLSTATE 40P01 or a timeout), and
// every key's tokens increase in the order of its grants.
func TestAcquireAllManyLockers(t *testing.T) {
	t.Parallel()
	p := shared(t)
	keys := []string{"m0", "m1", "m2", "m3", "m4"}
	var held [5]atomic.Int32
	var mu sync.Mutex
	last := map[string]lock.Token{}
	ctx := bg(t, 2*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	for g := range 4 {
		l := newLocker(t, p, func(c *Config) { c.Table = "multi_locks" })
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				idx := []int{(g + i) % 5, (g + i + 2) % 5, (g + i + 4) % 5}
				if g%2 == 1 {
					idx[0], idx[2] = idx[2], idx[0]
				}
				ks := []string{keys[idx[0]], keys[idx[1]], keys[idx[2]]}
				leases, err := l.AcquireAll(ctx, ks, lock.AcquireOptions{TTL: time.Minute})
				if err != nil {
					errs <- fmt.Errorf("locker %d round %d: %w", g, i, err)
					return
				}
				mu.Lock()
				for _, lease := range leases {
					if lease.Token <= last[lease.Key] {
						errs <- fmt.Errorf("%s: token %d after %d", lease.Key, lease.Token, last[lease.Key])
					}
					last[lease.Key] = lease.Token
				}
				mu.Unlock()
				for _, j := range idx {
					if !held[j].CompareAndSwap(0, 1) {
						errs <- fmt.Errorf("locker %d round %d: %s held twice", g, i, keys[j])
					}
				}
				for _, j := range idx {
					held[j].Store(0)
				}
				if err := lock.ReleaseAll(ctx, l, leases); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

// TestWantedNoticeBeforeGrant: a waiter's notice that reaches the listener
// before the grant it names is tracked marks the lease once it is; a
// notice for another token does not.
func TestWantedNoticeBeforeGrant(t *testing.T) {
	w := newWanted()
	w.notice("k", 7)
	for i := range earlyNotices - 1 { // others' notices, not enough to push it out
		w.notice(fmt.Sprint("x", i), lock.Token(100+i))
	}
	early := kit.NewLease(kit.Grant{Key: "k", Token: 7, Handle: lock.NewHandle(), TTL: time.Minute, Sent: time.Now()})
	w.granted(early, false, false)
	if !early.IsWanted() {
		t.Errorf("a lease whose notice came first is not wanted")
	}
	other := kit.NewLease(kit.Grant{Key: "k", Token: 8, Handle: lock.NewHandle(), TTL: time.Minute, Sent: time.Now()})
	w.granted(other, false, false)
	if other.IsWanted() {
		t.Errorf("a lease nobody noticed is wanted")
	}
	w.notice("k", 9)
	for i := range earlyNotices { // pushed out of the ring
		w.notice(fmt.Sprint("y", i), lock.Token(1000+i))
	}
	late := kit.NewLease(kit.Grant{Key: "k", Token: 9, Handle: lock.NewHandle(), TTL: time.Minute, Sent: time.Now()})
	w.granted(late, false, false)
	if late.IsWanted() {
		t.Errorf("a notice older than the ring still marks")
	}
}

// TestAcquireAllAutoRenew: multi-key leases taken with AutoRenew are
// renewed (each lease's deadline moves on past its first TTL), and zero
// options are normalized as for Acquire (DefaultTTL).
func TestAcquireAllAutoRenew(t *testing.T) {
	t.Parallel()
	p := shared(t)
	l := newLocker(t, p, func(c *Config) { c.Table = "multi_renew_locks" })
	ctx := bg(t, time.Minute)
	leases, err := l.AcquireAll(ctx, []string{"r1", "r2"}, lock.AcquireOptions{TTL: 600 * time.Millisecond, AutoRenew: true})
	if err != nil {
		t.Fatal(err)
	}
	first := []time.Time{leases[0].Deadline(), leases[1].Deadline()}
	eventually(t, 20*time.Second, "both leases renewed", func() bool {
		return leases[0].Deadline().After(first[0]) && leases[1].Deadline().After(first[1])
	})
	for _, lease := range leases {
		select {
		case <-lease.Done():
			t.Errorf("lease %q ended: %v", lease.Key, lease.Err())
		default:
		}
	}
	if err := lock.ReleaseAll(ctx, l, leases); err != nil {
		t.Fatal(err)
	}
	leases, err = l.AcquireAll(ctx, []string{"r1", "r2"}, lock.AcquireOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, lease := range leases {
		if lease.TTL() != lock.DefaultTTL {
			t.Errorf("lease %q of zero options has TTL %v, want %v", lease.Key, lease.TTL(), lock.DefaultTTL)
		}
	}
	lock.ReleaseAll(ctx, l, leases)
}

// TestSharedRebuiltLease: a shared grant rebuilt from its key, token and
// handle (its mode unknown, as the gateway rebuilds leases) renews and
// releases like the original, and the key is then free.
func TestSharedRebuiltLease(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a := newLocker(t, p, func(c *Config) { c.Table = "shared_locks" })
	b := newLocker(t, p, func(c *Config) { c.Table = "shared_locks" })
	ctx := bg(t, time.Minute)
	r1, err := a.Acquire(ctx, "rebuilt", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared, Owner: "r1"})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := a.Acquire(ctx, "rebuilt", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared, Owner: "r2"})
	if err != nil {
		t.Fatal(err)
	}
	info, err := b.Inspect(ctx, "rebuilt")
	if err != nil || info.Mode != lock.ModeShared || len(info.Holders) != 2 || info.Owner != "r1" || info.Token != r1.Token {
		t.Fatalf("Inspect: %+v, %v; want shared, r1 first of 2", info, err)
	}
	copy1 := kit.NewLease(kit.Grant{Key: r1.Key, Token: r1.Token, Handle: r1.Handle, TTL: time.Minute, Sent: time.Now()})
	if err := b.Renew(ctx, copy1, time.Minute); err != nil {
		t.Errorf("Renew of a rebuilt shared lease: %v", err)
	}
	if err := b.Release(ctx, copy1); err != nil {
		t.Errorf("Release of a rebuilt shared lease: %v", err)
	}
	if _, err := b.TryAcquire(ctx, "rebuilt", lock.AcquireOptions{TTL: time.Minute}); !errors.Is(err, lock.ErrNotAcquired) {
		t.Errorf("exclusive TryAcquire while r2 holds: %v, want ErrNotAcquired", err)
	}
	if err := a.Release(ctx, r2); err != nil {
		t.Fatal(err)
	}
	w, err := b.TryAcquire(ctx, "rebuilt", lock.AcquireOptions{TTL: time.Minute})
	if err != nil {
		t.Fatalf("exclusive TryAcquire after both readers released: %v", err)
	}
	if w.Token <= r2.Token {
		t.Errorf("writer's token %d, want > the readers' (%d)", w.Token, r2.Token)
	}
	// A rebuilt exclusive lease still releases (the shared fallback does
	// not get in the way), and a stale one is refused.
	if err := b.Release(ctx, kit.NewLease(kit.Grant{Key: w.Key, Token: w.Token, Handle: w.Handle, TTL: time.Minute, Sent: time.Now()})); err != nil {
		t.Errorf("Release of a rebuilt exclusive lease: %v", err)
	}
	if err := a.Release(ctx, r1); !errors.Is(err, lock.ErrNotHeld) {
		t.Errorf("second release of r1: %v, want ErrNotHeld", err)
	}
}

// TestQueueAcrossLockers: a reader of Locker B queued behind A's writer
// is served before a caller of A that queued in process afterwards: the
// release is not handed over inside A while B waits at the database.
func TestQueueAcrossLockers(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a := newLocker(t, p, func(c *Config) { c.Table = "queue_locks" })
	b := newLocker(t, p, func(c *Config) { c.Table = "queue_locks" })
	db := admin(t, p)
	ctx := bg(t, time.Minute)
	w, err := a.Acquire(ctx, "q", lock.AcquireOptions{TTL: time.Minute, Owner: "writer"})
	if err != nil {
		t.Fatal(err)
	}
	reader := make(chan *lock.Lease, 1)
	go func() {
		l, err := b.Acquire(ctx, "q", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared, Owner: "reader"})
		if err != nil {
			t.Error(err)
		}
		reader <- l
	}()
	eventually(t, 10*time.Second, "the reader queued", func() bool {
		var n int
		db.QueryRow(ctx, `SELECT count(*) FROM queue_locks_queue WHERE key = 'q' AND mode = 1`).Scan(&n)
		return n == 1
	})
	local := make(chan *lock.Lease, 1)
	go func() {
		l, err := a.Acquire(ctx, "q", lock.AcquireOptions{TTL: time.Minute, Owner: "local"})
		if err != nil {
			t.Error(err)
		}
		local <- l
	}()
	eventually(t, 10*time.Second, "the local caller queued in A", func() bool { return a.gate.Queued("q") == 1 })
	handoffs := a.stats.handoffs.Load()
	if err := a.Release(ctx, w); err != nil {
		t.Fatal(err)
	}
	r := <-reader
	if r == nil {
		t.FailNow()
	}
	select {
	case l := <-local:
		t.Fatalf("A's local caller was granted (token %d) while the reader queued before it held", l.Token)
	default:
	}
	if a.stats.handoffs.Load() != handoffs {
		t.Errorf("the release was handed over inside A although a reader of B was queued")
	}
	if err := b.Release(ctx, r); err != nil {
		t.Fatal(err)
	}
	l := <-local
	if l == nil || l.Token <= r.Token {
		t.Fatalf("local caller's lease %v, want a token above the reader's %d", l, r.Token)
	}
	a.Release(ctx, l)
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM queue_locks_queue WHERE key = 'q'`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tickets left in the queue (%v), want 0", n, err)
	}
}

// TestDeadWaiterTicket: a ticket whose waiter stopped refreshing it (a
// crashed waiter, written here directly) keeps newcomers out only until it
// expires; a waiter that gives up removes its ticket at once.
func TestDeadWaiterTicket(t *testing.T) {
	t.Parallel()
	p := shared(t)
	a := newLocker(t, p, func(c *Config) { c.Table = "dead_locks" })
	db := admin(t, p)
	ctx := bg(t, time.Minute)
	if _, err := db.Exec(ctx, `INSERT INTO dead_locks_queue VALUES ('dead', 1, 1, 0, clock_timestamp() + interval '1 second')
		ON CONFLICT (key, ticket) DO UPDATE SET expires_at = EXCLUDED.expires_at`); err != nil {
		t.Fatal(err)
	}
	if l, err := a.TryAcquire(ctx, "dead", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared}); err == nil {
		t.Fatalf("TryAcquire granted token %d while a waiter was queued", l.Token)
	}
	l, err := a.Acquire(ctx, "dead", lock.AcquireOptions{TTL: time.Minute, Mode: lock.ModeShared})
	if err != nil {
		t.Fatalf("Acquire after the dead ticket expired: %v", err)
	}
	// A waiter that gives up leaves the queue.
	wctx, cancel := context.WithCancel(ctx)
	gaveUp := make(chan error, 1)
	go func() {
		_, err := a.Acquire(wctx, "dead", lock.AcquireOptions{TTL: time.Minute})
		gaveUp <- err
	}()
	eventually(t, 10*time.Second, "the writer queued", func() bool {
		var n int
		db.QueryRow(ctx, `SELECT count(*) FROM dead_locks_queue WHERE key = 'dead' AND mode = 0`).Scan(&n)
		return n == 1
	})
	cancel()
	if err := <-gaveUp; !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled writer: %v", err)
	}
	var n int
	if err := db.QueryRow(ctx, `SELECT count(*) FROM dead_locks_queue WHERE key = 'dead' AND mode = 0`).Scan(&n); err != nil || n != 0 {
		t.Errorf("%d tickets of the cancelled writer left (%v), want 0", n, err)
	}
	a.Release(ctx, l)
}
