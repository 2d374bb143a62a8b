-- The live holder of a key and its remaining TTL in microseconds, measured
-- on the database's clock.
--
-- $1 key
SELECT owner, token, value,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint
  FROM {{table}}
 WHERE key = $1::text AND expires_at > clock_timestamp()
