-- The lock table and its token sequence. Run on every start, inside a
-- transaction that holds an advisory lock, so that Lockers starting together
-- do not race on the catalog. {{table}} and {{seq}} are quoted identifiers.

-- Fencing tokens: one sequence for all keys. nextval is never rolled back
-- and survives restarts, so tokens only grow.
CREATE SEQUENCE IF NOT EXISTS {{seq}} AS bigint MINVALUE 1;

CREATE TABLE IF NOT EXISTS {{table}} (
    key         text        PRIMARY KEY,
    owner       text        NOT NULL,
    -- the lease's secret handle: renew and release must present it
    handle      text        NOT NULL,
    token       bigint      NOT NULL,
    value       bytea,
    acquired_at timestamptz NOT NULL,
    -- the database's clock decides expiry; a row past expires_at is free
    expires_at  timestamptz NOT NULL,
    -- set by a waiter that found the key held (waiters.sql): the release
    -- then notifies; an uncontended release skips the notification
    contended   boolean     NOT NULL DEFAULT false,
    -- the grant's lock-delay in microseconds: after expires_at the key stays
    -- taken this much longer (acquire.sql); a release ends no delay
    lock_delay  bigint      NOT NULL DEFAULT 0
);

-- A table of an earlier version lacks the later columns: New adds them
-- (migrate in sqllock.go), with constant defaults, so without a rewrite:
-- lock_delay, and mode (0 exclusive, 1 shared) and permits (the
-- semaphore's N, 0 for a read lock) of a key held shared, whose main row
-- then has an empty handle (no lease presents one), the latest grant's
-- token, and the latest expiry of its holders (shared.go).

-- The holders of keys held shared: one row per grant.
CREATE TABLE IF NOT EXISTS {{holders}} (
    key         text        NOT NULL,
    handle      text        NOT NULL,
    owner       text        NOT NULL,
    token       bigint      NOT NULL,
    value       bytea,
    acquired_at timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key, handle)
);

-- The waiters of keys, in one FIFO order across modes (queue.go): a
-- waiter's ticket comes from the token sequence; a row whose waiter stopped
-- refreshing it is ignored after expires_at.
CREATE TABLE IF NOT EXISTS {{queue}} (
    key         text        NOT NULL,
    ticket      bigint      NOT NULL,
    mode        smallint    NOT NULL,
    permits     integer     NOT NULL,
    expires_at  timestamptz NOT NULL,
    PRIMARY KEY (key, ticket)
);
