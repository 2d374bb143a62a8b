-- What keeps a key from a TryAcquire: its live holder and remaining TTL, or
-- an expired row within its lock-delay (live false) and the rest of the
-- delay, in microseconds on the database's clock. No row: the key is free.
--
-- $1 key
SELECT owner, token, value,
       (extract(epoch FROM (CASE WHEN live THEN expires_at ELSE delay_end END) - now) * 1000000)::bigint,
       live
  FROM (SELECT l.*, clock_timestamp() AS now,
               l.expires_at > clock_timestamp() AS live,
               l.expires_at + l.lock_delay * interval '1 microsecond' AS delay_end
          FROM {{table}} AS l
         WHERE l.key = $1::text
           AND l.expires_at + l.lock_delay * interval '1 microsecond' > clock_timestamp()) AS r
