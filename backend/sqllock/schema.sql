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
-- (migrate in sqllock.go), with constant defaults, so without a rewrite.
