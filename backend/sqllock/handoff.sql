-- Release and re-grant in one statement: the lease ($3, $4) passes to a new
-- handle of this Locker's next waiter, with a fresh token drawn under the
-- key's advisory lock (see acquire.sql), unless waiters of other Lockers
-- are queued for the key (queued true, nothing changed: they come first).
-- token NULL and queued false: the old lease no longer holds the key. The
-- contended mark of waiters in other Lockers stays: the new holder learns
-- from it that they still wait (see waiters.sql).
--
-- $1 advisory class  $2 key  $3 old handle  $4 old token  $5 owner
-- $6 new handle  $7 value  $8 ttl in microseconds  $9 lock-delay in
-- microseconds
WITH fence AS (SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))::text AS f),
q AS (
SELECT EXISTS (SELECT 1 FROM {{queue}} AS w
                WHERE w.key = $2::text || fence.f AND w.expires_at > clock_timestamp()) AS queued
  FROM fence
), upd AS (
UPDATE {{table}} AS l
   SET owner       = $5::text,
       handle      = $6::text,
       token       = nextval({{seqlit}}),
       value       = $7::bytea,
       acquired_at = clock_timestamp(),
       expires_at  = clock_timestamp() + $8::bigint * interval '1 microsecond',
       lock_delay  = $9::bigint
  FROM q
 WHERE l.key = $2::text AND l.handle = $3::text AND l.token = $4::bigint
   AND l.expires_at > clock_timestamp() AND NOT q.queued
RETURNING l.token, l.contended
)
SELECT upd.token, upd.contended, q.queued FROM q LEFT JOIN upd ON true
