package sqllock

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/lockgate/lockgate/lock"
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
	//go:embed wanted.sql
	wantedSQL string
	//go:embed held.sql
	heldSQL string
	//go:embed fence.sql
	fenceSQL string
	//go:embed acquireall.sql
	acquireAllSQL string
	//go:embed takeover.sql
	takeoverSQL string
	//go:embed dequeue.sql
	dequeueSQL string
	//go:embed shared_state.sql
	sharedStateSQL string
	//go:embed shared_grant.sql
	sharedGrantSQL string
	//go:embed enqueue.sql
	enqueueSQL string
	//go:embed shared_release.sql
	sharedReleaseSQL string
	//go:embed shared_renew.sql
	sharedRenewSQL string
	//go:embed holders.sql
	holdersSQL string
)

// queries are the statements of one table, with its names filled in.
type queries struct {
	schema, acquire, release, handoff, renew, inspect, waiters, abandon, sweep, wanted, held string
	fence, acquireAll, dequeue                                                               string
	sharedState, sharedGrant, enqueue, sharedRelease, sharedRenew, holders                   string
}

func newQueries(n names) queries {
	lit := "'" + strings.ReplaceAll(n.seq, "'", "''") + "'"
	r := strings.NewReplacer("{{table}}", n.table, "{{seq}}", n.seq, "{{seqlit}}", lit,
		"{{holders}}", n.holders, "{{queue}}", n.queue,
		"{{takeover}}", strings.TrimSuffix(takeoverSQL, "\n"))
	return queries{
		schema:     r.Replace(schemaSQL),
		acquire:    r.Replace(acquireSQL),
		release:    r.Replace(releaseSQL),
		handoff:    r.Replace(handoffSQL),
		renew:      r.Replace(renewSQL),
		inspect:    r.Replace(inspectSQL),
		waiters:    r.Replace(waitersSQL),
		abandon:    r.Replace(abandonSQL),
		sweep:      r.Replace(sweepSQL),
		wanted:     r.Replace(wantedSQL),
		held:       r.Replace(heldSQL),
		fence:      r.Replace(fenceSQL),
		acquireAll: r.Replace(acquireAllSQL),
		dequeue:    r.Replace(dequeueSQL),

		sharedState:   r.Replace(sharedStateSQL),
		sharedGrant:   r.Replace(sharedGrantSQL),
		enqueue:       r.Replace(enqueueSQL),
		sharedRelease: r.Replace(sharedReleaseSQL),
		sharedRenew:   r.Replace(sharedRenewSQL),
		holders:       r.Replace(holdersSQL),
	}
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
// would start a runtime timer per statement: each new earliest timer can
// wake an idle scheduler thread, which then competes with PostgreSQL for
// the CPU on a small machine (docs/backends.md, "sqllock", has the
// client CPU per cycle with either). A statement cut off by the deadline
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
