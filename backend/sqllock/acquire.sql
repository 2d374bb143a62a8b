-- One attempt, one statement. The fence CTE takes a transaction-scoped
-- advisory lock on the key before nextval runs, so that grants of a key take
-- their tokens in the order they commit: without it an INSERT could draw its
-- token, stall, and land after a later grant (with a higher token) of the
-- same key had come and gone. A held, unexpired row makes DO UPDATE's WHERE
-- false and the statement return no row: the key is held. An expired row is
-- taken over atomically. A row held under the same handle (a re-sent
-- acquire) is granted again with its token unchanged, keeping its mark.
-- Waiters queued ahead ($8: this waiter's ticket, 0 for none) refuse it.
--
-- $1 advisory class  $2 key  $3 owner  $4 handle  $5 value  $6 ttl (µs)
-- $7 lock-delay (µs)  $8 ticket  $9 channel
WITH fence AS (SELECT pg_advisory_xact_lock($1::int4, hashtext($2::text))::text AS f),
ins AS (
INSERT INTO {{table}} AS l (key, owner, handle, token, value, acquired_at, expires_at, lock_delay)
SELECT $2::text, $3::text, $4::text, nextval({{seqlit}}), $5::bytea,
       clock_timestamp(), clock_timestamp() + $6::bigint * interval '1 microsecond', $7::bigint
  FROM fence
 -- (correlated with fence, so read after the advisory lock is taken)
 WHERE NOT EXISTS (SELECT 1 FROM {{queue}} AS q
                    WHERE q.key = $2::text || fence.f AND q.expires_at > clock_timestamp()
                      AND ($8::bigint = 0 OR q.ticket < $8::bigint))
    OR EXISTS (SELECT 1 FROM {{table}} AS o WHERE o.key = $2::text || fence.f AND o.handle = $4::text)
ON CONFLICT (key) DO UPDATE
{{takeover}}
   -- an expired row whose grant asked for a lock-delay keeps the key until
   -- its expiry plus the delay (lock_delay, microseconds), on this clock
 WHERE l.handle = EXCLUDED.handle
    OR (l.expires_at + l.lock_delay * interval '1 microsecond' <= clock_timestamp()
        AND NOT EXISTS (SELECT 1 FROM {{queue}} AS q
                         WHERE q.key = l.key AND q.expires_at > clock_timestamp()
                           AND ($8::bigint = 0 OR q.ticket < $8::bigint)))
RETURNING token, contended
), dq AS (
DELETE FROM {{queue}} AS q USING ins WHERE q.key = $2::text AND q.ticket = $8::bigint
)
-- a grant that left the queue tells the waiters behind it to look again
-- (they find it held, and mark it)
SELECT token, contended,
       CASE WHEN $8::bigint <> 0 AND EXISTS (SELECT 1 FROM {{queue}} AS q WHERE q.key = $2::text
                                              AND q.ticket <> $8::bigint AND q.expires_at > clock_timestamp())
            THEN pg_notify($9::text, $2::text) IS NULL END
  FROM ins
