package sqllock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/lock"
	"github.com/lockgate/lockgate/lock/localgate"
)

var (
	//go:embed schema.sql
	schemaSQL string
	//go:embed acquire.sql
	acquireSQL string
	//go:embed release.sql
	releaseSQL string
	//go:embed handoff.sql
	handoffSQL string
	//go:embed renew.sql
	renewSQL string
	//go:embed inspect.sql
	inspectSQL string
	//go:embed waiters.sql
	waitersSQL string
	//go:embed abandon.sql
	abandonSQL string
	//go:embed sweep.sql
	sweepSQL string
)

// queries are the statements of one table, with its names filled in.
type queries struct {
	schema, acquire, release, handoff, renew, inspect, waiters, abandon, sweep string
}

func newQueries(n names) queries {
	lit := "'" + strings.ReplaceAll(n.seq, "'", "''") + "'"
	r := strings.NewReplacer("{{table}}", n.table, "{{seq}}", n.seq, "{{seqlit}}", lit)
	return queries{
		schema:  r.Replace(schemaSQL),
		acquire: r.Replace(acquireSQL),
		release: r.Replace(releaseSQL),
		handoff: r.Replace(handoffSQL),
		renew:   r.Replace(renewSQL),
		inspect: r.Replace(inspectSQL),
		waiters: r.Replace(waitersSQL),
		abandon: r.Replace(abandonSQL),
		sweep:   r.Replace(sweepSQL),
	}
}

// Locker is a lock.Locker over one PostgreSQL table. It is safe for
// concurrent use; several Lockers (in one process or many) may share the
// table.
type Locker struct {
	cfg   Config
	names names
	q     queries
	class int32 // advisory-lock class of this table (see acquire.sql)
	pool  *pgxpool.Pool

	ctx    context.Context // ends at Close: stops waits, keep-alives and background work
	cancel context.CancelFunc

	mu     sync.Mutex
	closed bool
	ops    sync.WaitGroup // calls in progress
	bg     sync.WaitGroup // listener, sweeper, abandon retries
	subs   map[string][]*waiter
	gate   *localgate.Gate

	stats stats
}

// stats count events for tests and diagnostics.
type stats struct {
	attempts   atomic.Int64 // acquire statements sent
	held       atomic.Int64 // attempts that found the key held
	handoffs   atomic.Int64 // leases passed to a local waiter in one statement
	reconnects atomic.Int64 // times the listening connection was re-established
	swept      atomic.Int64 // expired rows deleted by the sweeper
}

var _ lock.Locker = (*Locker)(nil)

// New connects to the database of cfg, creates the lock table and its token
// sequence if missing (and the schema, for a schema-qualified table), starts
// listening for release notifications and returns a Locker. A database that
// cannot be reached gives an error matching lock.ErrUnavailable.
func New(ctx context.Context, cfg Config) (*Locker, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	n, err := parseTable(cfg.Table)
	if err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.URL)
	if err != nil {
		return nil, fmt.Errorf("sqllock: Config.URL: %w", err)
	}
	pcfg.MaxConns = int32(cfg.PoolSize)
	// Statements are bounded by socket deadlines, not by contexts with a
	// timeout (see queryRow), so taking a pooled connection is bounded by
	// other means: connecting by QueryTimeout unless the URL sets
	// connect_timeout, and the ping of a connection idle for over a second
	// (pgxpool's default check) by QueryTimeout, once per take: after
	// QueryTimeout the next connection is handed out unchecked and the
	// statement's own deadline decides.
	if pcfg.ConnConfig.ConnectTimeout <= 0 {
		pcfg.ConnConfig.ConnectTimeout = cfg.QueryTimeout
	}
	pcfg.PingTimeout = cfg.QueryTimeout
	pcfg.ShouldPing = func(ctx context.Context, p pgxpool.ShouldPingParams) bool {
		if p.IdleDuration <= time.Second {
			return false
		}
		start, ok := ctx.Value(takenAt{}).(time.Time)
		return !ok || time.Since(start) < cfg.QueryTimeout
	}
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("sqllock: Config.URL: %w", err)
	}
	h := fnv.New32a()
	h.Write([]byte(cfg.Table))
	lctx, cancel := context.WithCancel(context.Background())
	l := &Locker{
		cfg:    cfg,
		names:  n,
		q:      newQueries(n),
		class:  int32(h.Sum32()),
		pool:   pool,
		ctx:    lctx,
		cancel: cancel,
		subs:   make(map[string][]*waiter),
		gate:   localgate.New(MaxLocalHandoffs),
	}
	if err := l.createSchema(ctx); err != nil {
		cancel()
		pool.Close()
		return nil, err
	}
	conn, err := l.connectListener(ctx)
	if err != nil {
		cancel()
		pool.Close()
		return nil, unavailable("start: listen", n.plain, err)
	}
	l.bg.Add(1)
	go l.listen(conn)
	if cfg.SweepInterval > 0 {
		l.bg.Add(1)
		go l.sweeper()
	}
	return l, nil
}

// ddlLock is the advisory lock (bigint form) that serializes schema creation
// across Lockers, whatever their table.
const ddlLock = 0x6c6f636b67617465 // "lockgate"

// createSchema runs schema.sql in a transaction holding ddlLock, so that
// concurrent starts do not race on the catalog (CREATE … IF NOT EXISTS is
// not safe against a concurrent CREATE of the same name).
func (l *Locker) createSchema(ctx context.Context) error {
	ctx, cancel := l.roundTrip(ctx)
	defer cancel()
	tx, err := l.pool.Begin(ctx)
	if err != nil {
		return unavailable("start: create schema", l.names.plain, err)
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock($1)", int64(ddlLock)); err != nil {
		return l.fail("start: create schema", l.names.plain, err)
	}
	if l.names.schema != "" {
		if _, err := tx.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+l.names.schema); err != nil {
			return l.fail("start: create schema", l.names.plain, err)
		}
	}
	if _, err := tx.Exec(ctx, l.q.schema); err != nil {
		return l.fail("start: create table", l.names.plain, err)
	}
	if err := tx.Commit(ctx); err != nil {
		return l.fail("start: create table", l.names.plain, err)
	}
	return nil
}

// ClientID is the default owner of this Locker's leases.
func (l *Locker) ClientID() string { return l.cfg.ClientID }

// Table is the lock table as configured.
func (l *Locker) Table() string { return l.cfg.Table }

// begin registers a call; false when the Locker is closed.
func (l *Locker) begin() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return false
	}
	l.ops.Add(1)
	return true
}

// roundTrip bounds one round trip by QueryTimeout, or by ctx's deadline if
// that is earlier. It is for the rare statements (schema creation, the
// listening connection); the statements of Acquire, Release, Renew and
// Inspect use queryRow.
func (l *Locker) roundTrip(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.cfg.QueryTimeout)
}

// detached is ctx without its cancellation, for a statement whose outcome
// must be learned even when the caller gives up (an acquire, a handoff).
// QueryTimeout still bounds the statement (see queryRow).
func detached(ctx context.Context) context.Context {
	return context.WithoutCancel(ctx)
}

// takenAt is the context key of the instant queryRow started to take a
// pooled connection (see ShouldPing in New).
type takenAt struct{}

// queryRow runs one statement on a pooled connection and scans its row
// into dest (pgx.ErrNoRows: no row). ctx ends it early (a cancellation or
// an earlier deadline); QueryTimeout bounds it through the connection's
// socket deadline rather than a context.WithTimeout, which on this path
// would start a runtime timer per statement: on a loaded 2-core machine
// each new earliest timer can wake an idle scheduler thread that then
// competes with PostgreSQL for the CPU (Sequential: 10–15 µs of client
// CPU per acquire+release cycle). A statement cut off by the deadline
// fails as a broken connection would (pgx closes the connection), so its
// outcome is unknown, as with a context timeout.
func (l *Locker) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	c, err := l.pool.Acquire(context.WithValue(ctx, takenAt{}, time.Now()))
	if err != nil {
		return err
	}
	defer c.Release()
	nc := c.Conn().PgConn().Conn()
	nc.SetDeadline(time.Now().Add(l.cfg.QueryTimeout))
	err = c.QueryRow(ctx, sql, args...).Scan(dest...)
	nc.SetDeadline(time.Time{})
	return err
}

// Acquire implements lock.Locker. Callers of one Locker queue for a key in
// process, in arrival order; the first of them goes to the database, and a
// release hands the lock straight to the next (one UPDATE instead of a
// DELETE and an INSERT, at most MaxLocalHandoffs times in a row). The one at
// the database subscribes to the key's release notifications, attempts, and
// while the key is held sleeps until a notification arrives or the holder's
// TTL (as reported by the database) runs out, then attempts again. Across
// Lockers there is no order (not FIFO).
func (l *Locker) Acquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, false)
}

// TryAcquire implements lock.Locker: one attempt. A key held by another
// owner gives a *lock.HeldError naming the holder's owner, token and
// expiry.
func (l *Locker) TryAcquire(ctx context.Context, key string, opts lock.AcquireOptions) (*lock.Lease, error) {
	return l.acquire(ctx, key, opts, true)
}

func (l *Locker) acquire(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	if !l.begin() {
		return nil, lock.ErrClosed
	}
	defer l.ops.Done()
	opts, err := opts.Normalize(key, l.cfg.ClientID)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sqllock: acquire %q: %w", key, err)
	}
	// A re-sent acquire with the caller's own handle must not queue behind
	// the grant it may be re-sending: it bypasses the local gate.
	if try || opts.Handle != "" {
		lease, err := l.wait(ctx, key, opts, try)
		if err == nil && opts.AutoRenew {
			go lock.KeepAlive(l.ctx, l, lease)
		}
		return lease, err
	}
	lease, err := l.gate.Enter(ctx, l.ctx.Done(), key, opts, func() error { return l.gaveUp(ctx, key) }, l.releaseQuietly)
	if err != nil {
		return nil, err
	}
	if lease == nil {
		if lease, err = l.wait(ctx, key, opts, false); err != nil {
			l.gate.Exit(key)
			return nil, err
		}
		l.gate.Hold(lease, false)
	} else if err := l.gaveUp(ctx, key); err != nil {
		l.releaseQuietly(lease)
		return nil, err
	}
	if opts.AutoRenew {
		go lock.KeepAlive(l.ctx, l, lease)
	}
	return lease, nil
}

// gaveUp is the error to return instead of a grant when the caller's
// context or the Locker ended meanwhile.
func (l *Locker) gaveUp(ctx context.Context, key string) error {
	switch {
	case l.ctx.Err() != nil:
		return lock.ErrClosed
	case ctx.Err() != nil:
		return fmt.Errorf("sqllock: acquire %q: %w", key, ctx.Err())
	}
	return nil
}

// wait makes attempts until one succeeds (only one when try).
func (l *Locker) wait(ctx context.Context, key string, opts lock.AcquireOptions, try bool) (*lock.Lease, error) {
	var w *waiter
	if !try {
		// Subscribe before the first attempt: a release committed after
		// the attempt looked at the row then finds us listening.
		w = l.subscribe(key)
		defer l.unsubscribe(w)
	}
	retries := 0
	for {
		if w != nil {
			w.drain()
		}
		o := l.attempt(key, opts, try)
		if o.lease != nil {
			if err := l.gaveUp(ctx, key); err != nil {
				// The grant raced the cancellation: never leave it behind.
				l.releaseQuietly(o.lease)
				return nil, err
			}
			return o.lease, nil
		}
		if try {
			if o.err != nil {
				return nil, o.err
			}
			return nil, o.held
		}
		if err := l.gaveUp(ctx, key); err != nil {
			if o.err != nil {
				return nil, fmt.Errorf("%w (last attempt: %w)", err, o.err)
			}
			return nil, err
		}
		var pause time.Duration
		if o.err != nil {
			if !lock.IsRetryable(o.err) {
				return nil, o.err
			}
			retries++
			p, again := l.cfg.Retry.Backoff(retries)
			if !again {
				return nil, o.err
			}
			pause = p
		} else {
			// Sleep until the holder's TTL runs out on the database's
			// clock (plus a little, so that we arrive after it), unless
			// its release is announced first.
			retries = 0
			pause = o.remaining + time.Millisecond + rand.N(time.Millisecond)
		}
		t := time.NewTimer(pause)
		select {
		case <-w.wake:
		case <-t.C:
		case <-ctx.Done():
		case <-l.ctx.Done():
		}
		t.Stop()
		if err := l.gaveUp(ctx, key); err != nil {
			return nil, err
		}
	}
}

// outcome of one acquire attempt.
type outcome struct {
	lease     *lock.Lease
	held      *lock.HeldError
	remaining time.Duration // the holder's remaining TTL, on the database's clock
	err       error
}

// attempt runs acquire.sql once. Its context ignores the caller's
// cancellation, so that a grant is always learned and can be undone; when
// the outcome cannot be learned (the connection broke after the statement
// was sent) the grant, if any, is abandoned.
func (l *Locker) attempt(key string, opts lock.AcquireOptions, try bool) outcome {
	l.stats.attempts.Add(1)
	handle := opts.Handle
	if handle == "" {
		handle = lock.NewHandle()
	}
	c := detached(l.ctx)
	sent := time.Now()
	var token int64
	err := l.queryRow(c, l.q.acquire, []any{l.class, key, opts.Owner, handle, opts.Value, opts.TTL.Microseconds()}, &token)
	switch {
	case err == nil:
		return outcome{lease: lock.NewLease(lock.Grant{
			Key: key, Owner: opts.Owner, Token: lock.Token(token), Handle: handle, Value: opts.Value,
			TTL: opts.TTL, Sent: sent, DriftFactor: l.cfg.DriftFactor,
		})}
	case errors.Is(err, pgx.ErrNoRows):
		l.stats.held.Add(1)
		// A waiter marks the row so that its release notifies; a
		// TryAcquire only reads it.
		q := l.q.waiters
		if try {
			q = l.q.inspect
		}
		info, remaining, err := l.inspect(c, q, key)
		switch {
		case errors.Is(err, lock.ErrNotFound):
			// Released or expired since: try again at once.
			return outcome{held: &lock.HeldError{Key: key}}
		case err != nil:
			return outcome{held: &lock.HeldError{Key: key}, err: err}
		}
		return outcome{
			held:      &lock.HeldError{Key: key, Owner: info.Owner, Token: info.Token, Expires: info.Expires},
			remaining: remaining,
		}
	default:
		if outcomeUnknown(err) {
			l.abandon(key, handle, opts.TTL)
		}
		return outcome{err: l.fail("acquire", key, err)}
	}
}

// Renew implements lock.Locker: compare-and-extend on the database's clock.
func (l *Locker) Renew(ctx context.Context, lease *lock.Lease, ttl time.Duration) error {
	if !l.begin() {
		return lock.ErrClosed
	}
	defer l.ops.Done()
	ttl, err := lock.ValidateRenew(lease, ttl)
	if err != nil {
		return err
	}
	sent := time.Now()
	var token int64
	err = l.queryRow(ctx, l.q.renew, []any{lease.Key, lease.Handle, int64(lease.Token), ttl.Microseconds()}, &token)
	switch {
	case err == nil:
		return lease.Renewed(sent, ttl, true)
	case errors.Is(err, pgx.ErrNoRows):
		return lease.Renewed(sent, ttl, false)
	default:
		return l.fail("renew", lease.Key, err)
	}
}

// Release implements lock.Locker: compare-and-delete and a notification to
// the key's waiters in one statement, or, when a caller of this Locker
// waits for the key, a handoff to it.
func (l *Locker) Release(ctx context.Context, lease *lock.Lease) error {
	if !l.begin() {
		return lock.ErrClosed
	}
	defer l.ops.Done()
	if err := lock.ValidateLease(lease); err != nil {
		return err
	}
	if t := l.gate.TakeHandoff(lease); t != nil {
		return l.handoff(ctx, lease, t)
	}
	return l.release(ctx, lease)
}

func (l *Locker) release(ctx context.Context, lease *lock.Lease) error {
	var held bool
	var notified *bool
	err := l.queryRow(ctx, l.q.release, []any{lease.Key, lease.Handle, int64(lease.Token), l.names.channel}, &held, &notified)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("%w (outcome unknown)", l.fail("release", lease.Key, err))
	}
	if err == nil {
		l.deliver(lease.Key) // wake a local waiter without waiting for the notification
	}
	err = lease.Released(held)
	if held {
		l.gate.EndHolder(lease, lock.ErrReleased)
	} else {
		l.gate.EndHolder(lease, err)
	}
	return err
}

// releaseQuietly frees a grant nobody will use (one that raced its
// caller's cancellation). If the database cannot be reached, the grant is
// abandoned: deleted in the background as soon as possible.
func (l *Locker) releaseQuietly(lease *lock.Lease) {
	if err := l.release(context.Background(), lease); lock.IsRetryable(err) {
		l.abandon(lease.Key, lease.Handle, lease.TTL())
	}
	lease.End(lock.ErrReleased)
}

// abandon deletes, in the background, a grant whose holder is gone or
// never learned of it, retrying until the database answers, the grant's
// TTL is over (then it has expired by itself) or the Locker is closed.
func (l *Locker) abandon(key, handle string, ttl time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.bg.Add(1)
	go func() {
		defer l.bg.Done()
		deadline := time.Now().Add(ttl)
		ctx, cancel := context.WithDeadline(l.ctx, deadline)
		defer cancel()
		lock.Retry(ctx, l.cfg.Retry, nil, func(ctx context.Context) error {
			c, cancel := l.roundTrip(ctx)
			defer cancel()
			_, err := l.pool.Exec(c, l.q.abandon, key, handle, l.names.channel)
			if err != nil {
				l.cfg.Logger.Warn("sqllock: undoing an acquire whose outcome is unknown", "key", key, "err", err)
				return l.fail("abandon", key, err)
			}
			return nil
		})
	}()
}

// Inspect implements lock.Locker: the live row of key, its remaining TTL
// measured on the database's clock. Waiters is -1: they are not recorded in
// the database.
func (l *Locker) Inspect(ctx context.Context, key string) (*lock.LockInfo, error) {
	if !l.begin() {
		return nil, lock.ErrClosed
	}
	defer l.ops.Done()
	if err := lock.ValidateKey(key); err != nil {
		return nil, err
	}
	info, _, err := l.inspect(ctx, l.q.inspect, key)
	return info, err
}

// inspect runs inspect.sql or waiters.sql.
func (l *Locker) inspect(ctx context.Context, query, key string) (*lock.LockInfo, time.Duration, error) {
	now := time.Now()
	var (
		owner  string
		token  int64
		value  []byte
		micros int64
	)
	err := l.queryRow(ctx, query, []any{key}, &owner, &token, &value, &micros)
	switch {
	case errors.Is(err, pgx.ErrNoRows):
		return nil, 0, fmt.Errorf("%w: %q", lock.ErrNotFound, key)
	case err != nil:
		return nil, 0, l.fail("inspect", key, err)
	}
	remaining := time.Duration(micros) * time.Microsecond
	return &lock.LockInfo{
		Key: key, Owner: owner, Token: lock.Token(token), Value: value,
		Expires: now.Add(remaining), Waiters: -1,
	}, remaining, nil
}

// Close implements lock.Locker: waiters return ErrClosed, auto-renewals
// stop, and once in-flight calls have finished the listener, the sweeper
// and the pool are shut down. Held leases stay in the table until their
// TTL runs out unless released first (through another Locker, with a lease
// rebuilt by lock.NewLease). Grants being abandoned in the background are
// given up: they too expire at their TTL.
func (l *Locker) Close() error {
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	l.closed = true
	l.mu.Unlock()
	l.cancel()
	l.ops.Wait()
	l.bg.Wait()
	l.pool.Close()
	return nil
}

// sweeper deletes expired rows every SweepInterval.
func (l *Locker) sweeper() {
	defer l.bg.Done()
	t := time.NewTicker(l.cfg.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-l.ctx.Done():
			return
		case <-t.C:
		}
		c, cancel := l.roundTrip(l.ctx)
		tag, err := l.pool.Exec(c, l.q.sweep)
		cancel()
		if err != nil {
			if l.ctx.Err() == nil {
				l.cfg.Logger.Warn("sqllock: sweeping expired locks", "table", l.names.plain, "err", err)
			}
			continue
		}
		l.stats.swept.Add(tag.RowsAffected())
	}
}

// fail wraps a database error: connection failures, timeouts and
// transient server states match lock.ErrUnavailable; other server errors
// (a missing table, a permission) are returned as they are, wrapped.
func (l *Locker) fail(op, key string, err error) error {
	var pe *pgconn.PgError
	if errors.As(err, &pe) && !transient(pe.Code) {
		return fmt.Errorf("sqllock: %s %q: %w", op, key, err)
	}
	return unavailable(op, key, err)
}

func unavailable(op, key string, err error) error {
	return fmt.Errorf("%w: sqllock: %s %q: %w", lock.ErrUnavailable, op, key, err)
}

// transient reports SQLSTATE classes that mean "try again": connection
// exceptions (08), transaction rollbacks such as serialization failures
// and deadlocks (40), insufficient resources (53), operator intervention
// such as a terminated backend or a shutting-down server (57), and system
// errors (58).
func transient(code string) bool {
	switch {
	case len(code) < 2:
		return true
	case code[:2] == "08", code[:2] == "40", code[:2] == "53", code[:2] == "57", code[:2] == "58":
		return true
	}
	return false
}

// outcomeUnknown reports whether a statement that failed with err may
// nevertheless have committed: the request may have been sent, and no
// server error (which would mean the transaction aborted) came back.
func outcomeUnknown(err error) bool {
	var pe *pgconn.PgError
	return !errors.As(err, &pe) && !pgconn.SafeToRetry(err)
}
