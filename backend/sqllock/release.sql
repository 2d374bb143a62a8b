-- Compare-and-delete, and a notification to waiters when some waiter marked
-- the row (see waiters.sql), in one round trip: RETURNING computes both
-- for the deleted row, under its row lock, and the notification is sent
-- when the delete commits. The caller's own expired row is deleted too (the
-- key is free either way) but reported as not held, unless it is within
-- its lock-delay: a release after expiry does not end the delay. No row:
-- the lease was released, re-granted, or is in its lock-delay.
--
-- $1 key  $2 handle  $3 token  $4 channel
DELETE FROM {{table}}
 WHERE key = $1::text AND handle = $2::text AND token = $3::bigint
   AND (expires_at > clock_timestamp()
        OR expires_at + lock_delay * interval '1 microsecond' <= clock_timestamp())
RETURNING expires_at > clock_timestamp(),
          CASE WHEN contended THEN pg_notify($4::text, key) IS NULL END
