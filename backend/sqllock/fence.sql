-- The advisory locks of several keys (see acquire.sql), taken in one order
-- by every transaction, that of the lock numbers, so that two multi-key
-- attempts on overlapping keys never wait for each other in a cycle; a
-- one-key acquire takes one of them and nothing else first. Keys whose
-- hashes collide share a lock, taken once.
--
-- $1 advisory class  $2 keys
SELECT count(pg_advisory_xact_lock($1::int4, s.h))
  FROM (SELECT DISTINCT hashtext(k) AS h FROM unnest($2::text[]) AS k ORDER BY 1) AS s
