-- A waiter whose attempt was refused joins the key's queue (or refreshes its
-- place: $3 its ticket, 0 for none yet; nothing when $5 is false), marks a
-- live row as contended, so that its release notifies, and learns what
-- keeps the key: the holder and how long it stays, in microseconds on the
-- database's clock (its remaining TTL, or for an expired row within its
-- lock-delay, live false, the rest of the delay), and how long until the
-- first waiter queued ahead of it expires (ahead, NULL when none). The
-- statement always returns one row; owner is NULL when no row holds the
-- key (freed since the attempt, or only waiters ahead).
--
-- The first mark of a grant also tells its holder that it is wanted: a
-- notification on the table's channel whose payload is the holder's token,
-- a tab and the key (keys hold no control characters, so no release
-- notification looks like it). cur reads the row's latest version under
-- FOR UPDATE, so only the waiter that turns the mark on notifies. A row
-- within its lock-delay is not marked: nobody holds it.
--
-- $1 key  $2 channel  $3 ticket  $4 queue TTL (µs)  $5 enqueue
WITH enq AS (
    INSERT INTO {{queue}} (key, ticket, mode, permits, expires_at)
    SELECT $1::text, CASE WHEN $3::bigint = 0 THEN nextval({{seqlit}}) ELSE $3::bigint END, 0, 0,
           clock_timestamp() + $4::bigint * interval '1 microsecond'
     WHERE $5::bool
       -- an exclusive waiter queues only where readers are involved: once
       -- queued, or when others are queued, or when the key is held shared
       -- (queue.go); exclusive-only contention keeps the local gate's order
       AND ($3::bigint <> 0
            OR EXISTS (SELECT 1 FROM {{queue}} AS w WHERE w.key = $1::text AND w.expires_at > clock_timestamp())
            OR EXISTS (SELECT 1 FROM {{table}} AS m WHERE m.key = $1::text AND m.mode = 1 AND m.expires_at > clock_timestamp()))
    ON CONFLICT (key, ticket) DO UPDATE SET expires_at = EXCLUDED.expires_at
    RETURNING ticket
), cur AS (
    SELECT key, owner, token, value, contended, live, mode,
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
SELECT enq.ticket, cur.owner, cur.token, cur.value, cur.micros, cur.live,
       CASE WHEN cur.live AND NOT cur.contended THEN pg_notify($2::text, cur.token::text || E'\t' || cur.key) IS NULL END,
       (SELECT (extract(epoch FROM min(q.expires_at) - clock_timestamp()) * 1000000)::bigint
          FROM {{queue}} AS q
         WHERE q.key = $1::text AND q.expires_at > clock_timestamp()
           AND q.ticket < coalesce(enq.ticket, $3::bigint, 0) + CASE WHEN coalesce(enq.ticket, $3::bigint, 0) = 0 THEN 9223372036854775807 ELSE 0 END)
  FROM (SELECT 1) AS one LEFT JOIN enq ON true LEFT JOIN cur ON true
