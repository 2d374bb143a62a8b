-- Undo a grant whose outcome the client could not learn (the connection
-- broke after the statement was sent): delete it by its handle, wherever it
-- stands, and wake waiters.
--
-- $1 key  $2 handle  $3 channel
WITH d AS (DELETE FROM {{table}} WHERE key = $1::text AND handle = $2::text RETURNING key)
SELECT pg_notify($3::text, key) IS NULL FROM d
