-- A waiter whose attempt found the key held marks the live row as contended,
-- so that its release notifies, and learns the holder and its remaining TTL
-- in microseconds on the database's clock. No row: the key was freed since
-- the attempt, so the waiter tries again at once. The mark is made after the
-- failed attempt and under the row lock, so a release either sees it or
-- committed before it (and then there is no row to mark).
--
-- The first mark of a grant also tells its holder that it is wanted: a
-- notification on the table's channel whose payload is the holder's token,
-- a tab and the key (keys hold no control characters, so no release
-- notification looks like it; Lockers of earlier versions deliver it to
-- nobody). cur reads the row's latest version under FOR UPDATE, so
-- cur.contended is the value the mark changes: only the waiter that turns
-- it on notifies, and a row already marked is not written again. A grant
-- made while the row was marked learns it from its own statement
-- (handoff.sql, renew.sql) instead.
--
-- $1 key  $2 channel
WITH cur AS (
    SELECT key, owner, token, value, contended,
           (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint AS micros
      FROM {{table}}
     WHERE key = $1::text AND expires_at > clock_timestamp()
       FOR UPDATE
), mark AS (
    UPDATE {{table}} AS l
       SET contended = true
      FROM cur
     WHERE l.key = cur.key AND NOT cur.contended
)
SELECT owner, token, value, micros,
       CASE WHEN NOT contended THEN pg_notify($2::text, token::text || E'\t' || key) IS NULL END
  FROM cur
