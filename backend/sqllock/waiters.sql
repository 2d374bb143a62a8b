-- A waiter whose attempt found the key held marks the live row as contended,
-- so that its release notifies, and learns the holder and how long the key
-- stays taken, in microseconds on the database's clock: the holder's
-- remaining TTL, or, for an expired row within its lock-delay (live false),
-- the rest of the delay. No row: the key was freed since the attempt, so the
-- waiter tries again at once. The mark is made after the failed attempt and
-- under the row lock, so a release either sees it or committed before it
-- (and then there is no row to mark).
--
-- The first mark of a grant also tells its holder that it is wanted: a
-- notification on the table's channel whose payload is the holder's token,
-- a tab and the key (keys hold no control characters, so no release
-- notification looks like it; Lockers of earlier versions deliver it to
-- nobody). cur reads the row's latest version under FOR UPDATE, so
-- cur.contended is the value the mark changes: only the waiter that turns
-- it on notifies, and a row already marked is not written again. A grant
-- made while the row was marked learns it from its own statement
-- (handoff.sql, renew.sql) instead. A row within its lock-delay is not
-- marked: nobody holds it, and the waiter sleeps until the delay ends.
--
-- $1 key  $2 channel
WITH cur AS (
    SELECT key, owner, token, value, contended, live,
           (extract(epoch FROM (CASE WHEN live THEN expires_at ELSE delay_end END) - now) * 1000000)::bigint AS micros
      FROM (SELECT l.*, clock_timestamp() AS now,
                   l.expires_at > clock_timestamp() AS live,
                   l.expires_at + l.lock_delay * interval '1 microsecond' AS delay_end
              FROM {{table}} AS l
             WHERE l.key = $1::text
               AND l.expires_at + l.lock_delay * interval '1 microsecond' > clock_timestamp()
               FOR UPDATE) AS r
), mark AS (
    UPDATE {{table}} AS l
       SET contended = true
      FROM cur
     WHERE l.key = cur.key AND cur.live AND NOT cur.contended
)
SELECT owner, token, value, micros, live,
       CASE WHEN live AND NOT contended THEN pg_notify($2::text, token::text || E'\t' || key) IS NULL END
  FROM cur
