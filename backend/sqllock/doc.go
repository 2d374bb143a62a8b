// Package sqllock is lockgate's PostgreSQL backend: the classic database
// lock (a table with one row per held key and an expiry column), for teams
// that have PostgreSQL and no other infrastructure, with real fencing
// tokens and waiting without polling. It uses github.com/jackc/pgx/v5.
//
//	l, err := sqllock.New(ctx, sqllock.DefaultConfig("postgres://user@host/db"))
//	defer l.Close()
//
// # Schema
//
// New creates, if missing, the table (Config.Table, default
// "lockgate_locks"; "schema.table" creates the schema too) and its token
// sequence "<table>_token_seq", from the embedded schema.sql, inside a
// transaction holding an advisory lock so that Lockers starting together
// do not race on the catalog. Names are quoted with pgx.Identifier; names
// PostgreSQL would truncate or cannot store are rejected.
//
//	key text PRIMARY KEY, owner text, handle text, token bigint,
//	value bytea, acquired_at timestamptz, expires_at timestamptz,
//	contended boolean, lock_delay bigint
//
// A table created by an earlier version gains the later columns
// (contended, lock_delay) at New, with constant defaults, so without a
// rewrite; New reads the catalog first and runs ALTER TABLE only for a
// missing column (an ALTER takes an ACCESS EXCLUSIVE lock even when it
// changes nothing). Lockers of earlier versions keep working on a migrated
// table but ignore lock-delays.
//
// # Statements
//
// Each operation is one statement, one round trip (the *.sql files beside
// this package, prepared and cached by pgx):
//
//   - acquire.sql: INSERT … ON CONFLICT (key) DO UPDATE … WHERE the existing
//     row has expired, RETURNING the token. Taking over an expired lock is
//     atomic. No row back means the key is held; only then a second
//     statement reads the holder (owner, token, remaining TTL) for the
//     *lock.HeldError or the wait.
//   - renew.sql: UPDATE … WHERE key, handle and token match and the row has
//     not expired, reading back whether a waiter marked it (see Wanted).
//   - release.sql: DELETE … WHERE key, handle and token match, and
//     pg_notify to waiters in the same statement when a waiter marked the
//     row (below). A stale lease (expired, released, re-granted) matches no
//     row or an expired one: lock.ErrNotHeld, and the current holder is
//     untouched.
//   - handoff.sql: release and re-grant to the next caller of the same
//     Locker in one UPDATE (see Waiting).
//   - inspect.sql: the live row and its remaining TTL.
//
// Every expiry is decided by the database's clock (clock_timestamp()); the
// client's wall clock is never used. The holder's lease deadline is computed
// by kit.NewLease on the client's monotonic clock from the instant just
// before the acquire was sent, minus the drift allowance, so the client stops
// believing it holds the lock before the database lets anyone else in, as
// long as the two clocks run at about the same rate (Config.DriftFactor).
//
// # Fencing tokens
//
// Tokens come from the sequence: nextval is durable, never rolled back and
// never reused, so tokens grow across restarts and across keys. Sequence
// values are drawn before a row is written, so two grants of one key could
// otherwise commit in the opposite order of their tokens (an INSERT draws
// 10, stalls, and lands after a grant with 11 came and went). The acquire
// and handoff statements therefore draw the token while holding a
// transaction-scoped advisory lock on (table, hashtext(key)): grants of a
// key draw tokens in commit order, and tokens strictly increase per key,
// through releases, handoffs and expiry takeovers alike. (Keys whose hashes
// collide merely serialize their acquires.)
//
// # Waiting
//
// Waiters do not poll. Each Locker keeps one dedicated connection that
// LISTENs on the table's channel and fans notifications out, in process, to
// the waiters of the released key only. Within a Locker, callers of Acquire
// queue per key (the local gate, FIFO in process): only the first goes to
// the database, and when a holder releases while a local caller waits, the
// lease is handed over in one UPDATE with a new handle and token, at most
// localgate.MaxHandoffs times in a row before the key is really released so that
// other Lockers get their chance. Across Lockers there is no order: the
// backend is not FIFO.
//
// The caller at the database subscribes to the key in process before it
// attempts, so a release committed between its attempt and its sleep is not
// missed. When its attempt finds the key held, it marks the live row
// contended (waiters.sql) and learns the holder's remaining TTL from the
// database; it then sleeps until that TTL has run out, or until a
// notification for the key arrives, whichever is first. A release notifies
// only if the row was marked: an uncontended acquire/release pays nothing
// for waiting support. If the listening connection breaks, it is replaced
// (and checked with a ping after Config.ListenPing of silence), and every
// waiter is woken to try again, since notifications sent meanwhile are
// lost.
//
// # Wanted
//
// The Locker implements lock.WantedSignaler: a lease's Wanted closes when
// a caller waits for its key. A waiter at the database marks the row
// contended (above); the mark that turns it on also sends, in the same
// statement, a notification "token<TAB>key" on the table's channel, and the
// Locker holding that grant (every Locker listens there already) marks its
// lease. Grants made while the row is marked (a local handoff, a re-sent
// acquire) and every renewal read the mark back in their own statement, so
// a new holder, a lease rebuilt with kit.NewLease and passed to Renew,
// and a holder whose notification was lost are told too; after the
// listening connection is replaced, one query reads the marks of the keys
// this Locker holds. A caller of the same Locker that queues for a key
// the Locker holds marks the lease in process, with no round trip, and a
// grant made while such callers wait is marked as it is made. The cost: no
// statement and no notification for a key nobody waits for; one
// notification per wanted grant, fanned out to every Locker of the table;
// per held lease a map entry and an AfterEnd callback, no goroutine. The
// mark lasts until the grant ends even if its waiter gave up, so a lease
// handed over locally afterwards may be told it is wanted by nobody.
//
// # Beyond the exclusive lock (lock.Features)
//
// The Locker offers lock.FeatureShared, lock.FeatureSemaphore,
// lock.FeatureMultiKey and lock.FeatureLockDelay, and refuses watches
// (ReasonWatch), lock-delay on shared grants (ReasonSharedLockDelay) and
// shared multi-key acquires (ReasonMultiShared) with lock.ErrUnsupported
// before sending anything.
//
// Shared locks and semaphores (shared.go) keep one holder row per grant in
// "<table>_holders", each with its own token and expiry; the key's main
// row says mode 1, the permits, an empty handle, the latest token and the
// latest expiry of the holders, so an exclusive acquire finds the key held
// until the last shared holder ends. A shared attempt, release or renewal
// is a transaction holding the key's advisory lock (four or five round
// trips, against one for an exclusive acquire). An acquire with another
// number of permits than the live holders' fails at once with
// lock.ErrPermitsMismatch.
//
// Waiters are ordered across modes and Lockers by the queue table
// "<table>_queue" (queue.go): a waiter joins it with a ticket from the
// token sequence, refreshes it at least every second, and is granted only
// when no live ticket before its own is queued; a ticket whose waiter
// stopped counts for 3 s, and one whose waiter gave up is removed at once.
// Shared waiters always queue; an exclusive waiter queues when readers are
// involved (the key is held shared, or somebody is queued), so that
// exclusive-only contention keeps its former throughput (the local gate's
// handoffs, no order across Lockers). The order this gives: no caller is
// granted ahead of a queued one, so a queued writer is not overtaken by
// later readers nor a queued reader by later writers; a writer that was
// already waiting for an exclusive holder when a reader queued joins the
// queue behind that reader. While anybody is queued, a release is never
// handed over inside a Locker. Shared holders hear that they are wanted at
// their next renewal (the latest of them at once, by notification).
//
// Multi-key acquires (AcquireAll, TryAcquireAll; multi.go) are one
// transaction per attempt: fence.sql takes the keys' advisory locks in the
// order of their lock numbers, acquireall.sql inserts or takes over every
// key row as acquire.sql does for one, and the transaction commits only if
// every key was granted, else rolls back. A caller holds all of its keys or
// none at every instant; callers listing overlapping keys in any order
// never deadlock (one lock order, nothing held while waiting); each key
// gets its own token, drawn under its advisory lock. A waiting caller marks
// the first key that refused it and sleeps until a release of any of its
// keys is announced or that key's holder's TTL runs out. Multi-key callers
// do not queue in the local gate, and are not FIFO: single-key callers can
// overtake them.
//
// Lock-delay (AcquireOptions.LockDelay) is a takeover condition: the row
// keeps its grant's delay (lock_delay) and an expired row is taken over
// only once expires_at + lock_delay has passed, on the database's clock
// (acquire.sql, acquireall.sql). A release deletes the row, so it ends no
// delay; a release that comes after the expiry is refused (ErrNotHeld) and
// leaves the delay in place; the sweeper keeps rows within their delay. A
// TryAcquire within the delay gets a *lock.DelayedError; a waiter sleeps
// until the delay ends. A local handoff gives the new grant its own delay.
//
// # Expired rows
//
// An expired row holds nothing: the next acquire of the key overwrites it
// (once its lock-delay, if any, has passed), Inspect ignores it, and a
// background sweeper in every Locker deletes expired rows past their
// lock-delay (up to 1000 per run, skipping locked rows) every
// Config.SweepInterval (one minute by default; negative disables it). The
// sweep is a sequential scan: the table holds only live and recently
// expired rows.
//
// # Failures
//
// Connection failures, timeouts and transient server states (SQLSTATE
// classes 08, 40, 53, 57, 58) give errors matching lock.ErrUnavailable with
// the cause wrapped; Acquire retries them (Config.Retry) until its context
// ends. Config.QueryTimeout bounds each statement through its connection's
// socket deadline (a timer per statement on a context would cost the hot
// path more than the deadline does). An acquire is never cut short by its
// caller's cancellation (only by Config.QueryTimeout), so a grant that
// raced the cancellation is learned and released. If the connection breaks
// after an acquire or handoff was sent and before its answer arrived, the
// grant may exist under a handle nobody knows: the Locker deletes it by
// handle in the background, retrying until the grant's TTL ends. A backend
// terminated mid-statement aborts its transaction: no ghost row. A Release
// whose answer is lost reports ErrUnavailable (outcome unknown).
//
// # Guarantees and caveats
//
//   - Mutual exclusion holds as judged by the primary's clock. A step of
//     the database server's wall clock (NTP, a VM migration) moves every
//     expiry with it: a forward jump expires leases early, while their
//     holders still believe they hold them. Fencing tokens are the guard.
//   - A holder paused longer than its TTL (GC, SIGSTOP, a slow disk) wakes
//     up past its deadline believing nothing happened; the next holder's
//     larger token lets a fenced resource reject the stale writer.
//   - Tokens need synchronous_commit = on (the default): with it off, a
//     crash can lose a committed grant and the sequence's advance together
//     and issue the same token again.
//   - Failover to an asynchronously replicated standby can lose the last
//     commits: a lock row (two holders then believe they hold the key) and
//     the sequence's advance (a later grant can reuse a token already
//     given out, so fencing fails too). PostgreSQL pre-logs sequences 32
//     values ahead, which hides small losses, but promises nothing. Use
//     synchronous replication (synchronous_commit = remote_apply or on with
//     a synchronous standby) if the lock must survive failover.
//   - A connection pooler in transaction mode (PgBouncer) works only with
//     pgx's simple or exec protocol (default_query_exec_mode in the URL),
//     and LISTEN needs a session: point the Locker at the database directly.
//   - Throughput is bounded by one round trip per grant to a single
//     primary, and every grant is a committed write (WAL): the
//     measurements are in docs/backends.md ("sqllock").
package sqllock
