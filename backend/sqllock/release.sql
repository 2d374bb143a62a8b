-- Compare-and-delete, and a notification to waiters when some waiter marked
-- the row (see waiters.sql), in one round trip. The caller's own expired row
-- is deleted too (the key is free either way) but reported as not held. No
-- row: the lease was released or re-granted.
--
-- $1 key  $2 handle  $3 token  $4 channel
WITH d AS (
    DELETE FROM {{table}}
     WHERE key = $1::text AND handle = $2::text AND token = $3::bigint
    RETURNING key, contended, expires_at > clock_timestamp() AS held
)
SELECT held, CASE WHEN contended THEN pg_notify($4::text, key) IS NULL END FROM d
