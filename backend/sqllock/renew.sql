-- Compare-and-extend: only an unexpired row with the lease's handle and
-- token is extended, to ttl from the database's now. contended tells the
-- holder that a waiter marked the row (a notification may have been lost,
-- or the lease is a copy rebuilt from its fields: see wanted.go).
--
-- $1 key  $2 handle  $3 token  $4 ttl in microseconds
UPDATE {{table}}
   SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
 WHERE key = $1::text AND handle = $2::text AND token = $3::bigint
   AND expires_at > clock_timestamp()
RETURNING token, contended
