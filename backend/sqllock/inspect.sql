-- The live holder of a key and its remaining TTL in microseconds, measured
-- on the database's clock, and how it is held (mode 1: shared, by the rows
-- of holders.sql).
--
-- $1 key
SELECT owner, token, value,
       (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint,
       mode, permits
  FROM {{table}}
 WHERE key = $1::text AND expires_at > clock_timestamp()
