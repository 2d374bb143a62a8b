package sqllock

import (
	"context"
	"fmt"
	"hash/fnv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/lockgate/lockgate/internal/lifecycle"
	"github.com/lockgate/lockgate/internal/localgate"
	"github.com/lockgate/lockgate/lock"
)

// Locker is a lock.Locker over one PostgreSQL table. It is safe for
// concurrent use; several Lockers (in one process or many) may share the
// table.
type Locker struct {
	cfg   Config
	names names
	q     queries
	class int32 // advisory-lock class of this table (see acquire.sql)
	pool  *pgxpool.Pool

	// life counts the calls in progress and the background work (listener,
	// sweeper, abandon retries); ctx is its context, which ends at Close:
	// it stops waits, keep-alives and background work.
	life *lifecycle.State
	ctx  context.Context

	mu   sync.Mutex
	subs map[string][]*waiter
	gate *localgate.Sequence

	// wanted tracks held leases and local waiters for the wanted signal
	// (wanted.go).
	wanted   *wanted
	rechecks atomic.Int64 // recheckWanted runs asked for and not yet done

	stats stats

	// tickets are the queue tickets of the gate's callers at the database
	// (queue.go), guarded by tmu.
	tmu     sync.Mutex
	tickets map[string]*ticketState
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
	life := lifecycle.New()
	lctx := life.Context()
	l := &Locker{
		cfg:    cfg,
		names:  n,
		q:      newQueries(n),
		class:  int32(h.Sum32()),
		pool:   pool,
		life:   life,
		ctx:    lctx,
		subs:   make(map[string][]*waiter),
		wanted: newWanted(),

		tickets: make(map[string]*ticketState),
	}
	l.gate = localgate.NewSequence(localgate.Backend{Locker: l, Ctx: lctx,
		Attempt: l.attemptOnce, Subscribe: l.subscribeGate, SubscribeFirst: true, Retry: cfg.Retry, Handoff: l.handoff, Release: l.release, GaveUp: l.gaveUp, Discard: l.releaseQuietly})
	if err := l.createSchema(ctx); err != nil {
		life.Close()
		pool.Close()
		return nil, err
	}
	conn, err := l.connectListener(ctx)
	if err != nil {
		life.Close()
		pool.Close()
		return nil, unavailable("start: listen", n.plain, err)
	}
	life.Go(func() { l.listen(conn) })
	if cfg.SweepInterval > 0 {
		life.Go(l.sweeper)
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
	if err := l.migrate(ctx, tx); err != nil {
		return err
	}
	if err := tx.Commit(ctx); err != nil {
		return l.fail("start: create table", l.names.plain, err)
	}
	return nil
}

// addedColumns are the columns added to the table after its first
// version, with their definitions: constant defaults, so that adding one
// rewrites no row. Lockers of earlier versions keep working on the
// migrated table (they do not name the new columns), but they ignore
// what the columns mean: a lock-delay is honoured only by Lockers that
// know lock_delay.
var addedColumns = []struct{ name, def string }{
	{"contended", "boolean NOT NULL DEFAULT false"},
	{"lock_delay", "bigint NOT NULL DEFAULT 0"},
	{"mode", "smallint NOT NULL DEFAULT 0"},
	{"permits", "integer NOT NULL DEFAULT 0"},
}

// migrate adds the columns a table created by an earlier version lacks.
// It reads the catalog first and alters the table only for a missing
// column: ALTER TABLE takes an ACCESS EXCLUSIVE lock even when it changes
// nothing, which would stall every lock statement on the table at each
// start of a Locker. It runs in createSchema's transaction, under ddlLock.
func (l *Locker) migrate(ctx context.Context, tx pgx.Tx) error {
	for _, c := range addedColumns {
		var have bool
		err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_attribute
			WHERE attrelid = to_regclass($1::text) AND attname = $2::text AND NOT attisdropped)`,
			l.names.table, c.name).Scan(&have)
		if err != nil {
			return l.fail("start: migrate table", l.names.plain, err)
		}
		if have {
			continue
		}
		if _, err := tx.Exec(ctx, "ALTER TABLE "+l.names.table+" ADD COLUMN IF NOT EXISTS "+c.name+" "+c.def); err != nil {
			return l.fail("start: migrate table", l.names.plain, err)
		}
	}
	return nil
}

// ClientID is the default owner of this Locker's leases.
func (l *Locker) ClientID() string { return l.cfg.ClientID }

// Table is the lock table as configured.
func (l *Locker) Table() string { return l.cfg.Table }

// Close implements lock.Locker: waiters return ErrClosed, auto-renewals
// stop, and once in-flight calls have finished the listener, the sweeper
// and the pool are shut down. Held leases stay in the table until their
// TTL runs out unless released first (through another Locker, with a lease
// rebuilt by kit.NewLease). Grants being abandoned in the background are
// given up: they too expire at their TTL.
func (l *Locker) Close() error {
	if !l.life.Close() {
		return nil
	}
	l.pool.Close()
	return nil
}

// sweeper deletes expired rows every SweepInterval.
func (l *Locker) sweeper() {
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
