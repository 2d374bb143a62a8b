-- A shared grant, after shared_state.sql found the key compatible and
-- nobody queued ahead, in the same transaction (holding the key's advisory
-- lock): a holder row with a fresh token, and the main row made (or kept)
-- shared, with the latest token and the latest expiry of its holders, so
-- that an exclusive acquire (acquire.sql) finds it held until every shared
-- holder has ended. The grant leaves the queue; the waiters behind it are
-- told to look again (the next ones may be readers too).
--
-- $1 key  $2 handle  $3 owner  $4 value  $5 ttl (µs)  $6 permits
-- $7 ticket  $8 channel
WITH gone AS (
    DELETE FROM {{holders}} WHERE key = $1::text AND expires_at <= clock_timestamp()
), h AS (
    INSERT INTO {{holders}} (key, handle, owner, token, value, acquired_at, expires_at)
    VALUES ($1::text, $2::text, $3::text, nextval({{seqlit}}), $4::bytea,
            clock_timestamp(), clock_timestamp() + $5::bigint * interval '1 microsecond')
    RETURNING token, expires_at
), m AS (
    INSERT INTO {{table}} AS l (key, owner, handle, token, value, acquired_at, expires_at, lock_delay, mode, permits)
    SELECT $1::text, '', '', h.token, NULL, clock_timestamp(), h.expires_at, 0, 1, $6::integer FROM h
    ON CONFLICT (key) DO UPDATE
       SET owner       = '',
           handle      = '',
           token       = EXCLUDED.token,
           value       = NULL,
           acquired_at = CASE WHEN l.mode = 1 AND l.expires_at > clock_timestamp() THEN l.acquired_at ELSE EXCLUDED.acquired_at END,
           expires_at  = greatest(CASE WHEN l.mode = 1 THEN l.expires_at END, EXCLUDED.expires_at),
           lock_delay  = 0,
           mode        = 1,
           permits     = EXCLUDED.permits,
           contended   = l.contended AND l.mode = 1 AND l.expires_at > clock_timestamp()
    RETURNING contended
), dq AS (
    DELETE FROM {{queue}} WHERE key = $1::text AND ticket = $7::bigint
)
SELECT h.token, m.contended,
       CASE WHEN EXISTS (SELECT 1 FROM {{queue}} AS w
                          WHERE w.key = $1::text AND w.ticket <> $7::bigint AND w.expires_at > clock_timestamp())
            THEN pg_notify($8::text, $1::text) IS NULL END
  FROM h, m
