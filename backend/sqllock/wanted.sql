-- The marked (contended) live rows among keys this Locker holds, read once
-- the listening connection was replaced: notifications that a waiter marked
-- a row were lost meanwhile (see wanted.go).
--
-- $1 keys
SELECT key, token
  FROM {{table}}
 WHERE key = ANY($1::text[]) AND contended AND expires_at > clock_timestamp()
