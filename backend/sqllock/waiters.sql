-- A waiter whose attempt found the key held marks the live row as contended,
-- so that its release notifies, and learns the holder and its remaining TTL
-- in microseconds on the database's clock. No row: the key was freed since
-- the attempt, so the waiter tries again at once. The mark is made after the
-- failed attempt and under the row lock, so a release either sees it or
-- committed before it (and then there is no row to mark).
--
-- $1 key
UPDATE {{table}}
   SET contended = true
 WHERE key = $1::text AND expires_at > clock_timestamp()
RETURNING owner, token, value,
          (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
