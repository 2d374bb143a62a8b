-- The renewal of a live shared grant, in a transaction holding the key's
-- advisory lock: its holder row and, if later, the main row's expiry move
-- to ttl from now. contended: a waiter marked the key. No row: not held.
--
-- $1 key  $2 handle  $3 token  $4 ttl (µs)
WITH h AS (
    UPDATE {{holders}}
       SET expires_at = clock_timestamp() + $4::bigint * interval '1 microsecond'
     WHERE key = $1::text AND handle = $2::text AND token = $3::bigint AND expires_at > clock_timestamp()
    RETURNING expires_at
), m AS (
    UPDATE {{table}} AS l
       SET expires_at = greatest(l.expires_at, h.expires_at)
      FROM h
     WHERE l.key = $1::text AND l.mode = 1 AND l.expires_at > clock_timestamp()
    RETURNING l.contended
)
SELECT m.contended FROM m
