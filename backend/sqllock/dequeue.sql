-- A waiter that gave up leaves the key's queue, and the waiters behind it
-- are told to look again.
--
-- $1 key  $2 ticket  $3 channel
WITH d AS (DELETE FROM {{queue}} WHERE key = $1::text AND ticket = $2::bigint RETURNING key)
SELECT pg_notify($3::text, key) IS NULL FROM d
