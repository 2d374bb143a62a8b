-- The live shared holders of a key, oldest grant first, with their
-- remaining TTL in microseconds on the database's clock.
--
-- $1 key
SELECT owner, token, value,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
  FROM {{holders}}
 WHERE key = $1::text AND expires_at > clock_timestamp()
 ORDER BY token
