-- One attempt, one statement. The fence CTE takes a transaction-scoped
-- advisory lock on the key before nextval runs, so that grants of a key take
-- their tokens in the order they commit: without it an INSERT could draw its
-- token, stall, and land after a later grant (with a higher token) of the
-- same key had come and gone. A held, unexpired row makes DO UPDATE's WHERE
-- false and the statement return no row: the key is held. An expired row is
-- taken over atomically. A row held under the same handle (a re-sent acquire
-- with a caller-chosen handle) is granted again with its token unchanged,
-- and keeps its contended mark: the re-sent grant is told it is wanted.
--
-- $1 advisory class (per table)  $2 key  $3 owner  $4 handle  $5 value
-- $6 ttl in microseconds  $7 lock-delay in microseconds
WITH fence AS (SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text)))
INSERT INTO {{table}} AS l (key, owner, handle, token, value, acquired_at, expires_at, lock_delay)
SELECT $2::text, $3::text, $4::text, nextval({{seqlit}}), $5::bytea,
       clock_timestamp(), clock_timestamp() + $6::bigint * interval '1 microsecond', $7::bigint
FROM fence
ON CONFLICT (key) DO UPDATE
   SET owner       = EXCLUDED.owner,
       handle      = EXCLUDED.handle,
       token       = CASE WHEN l.handle = EXCLUDED.handle THEN l.token ELSE EXCLUDED.token END,
       value       = EXCLUDED.value,
       acquired_at = EXCLUDED.acquired_at,
       expires_at  = EXCLUDED.expires_at,
       lock_delay  = EXCLUDED.lock_delay,
       -- a takeover starts afresh: waiters that still want the key find
       -- it held again and mark it again
       contended   = l.contended AND l.handle = EXCLUDED.handle
   -- an expired row whose grant asked for a lock-delay keeps the key until
   -- its expiry plus the delay (lock_delay, microseconds), on this clock
 WHERE l.expires_at + l.lock_delay * interval '1 microsecond' <= clock_timestamp()
    OR l.handle = EXCLUDED.handle
RETURNING token, contended
