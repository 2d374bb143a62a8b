-- A shared waiter refused joins (or refreshes its place in) the key's
-- queue; when holders refused it ($5), it marks the live main row
-- contended so that their releases notify, and the first mark of an
-- exclusive grant tells its holder it is wanted (as waiters.sql does).
--
-- $1 key  $2 ticket (0: none yet)  $3 permits  $4 queue TTL (µs)  $5 mark
-- $6 channel
WITH enq AS (
    INSERT INTO {{queue}} (key, ticket, mode, permits, expires_at)
    VALUES ($1::text, CASE WHEN $2::bigint = 0 THEN nextval({{seqlit}}) ELSE $2::bigint END, 1, $3::integer,
            clock_timestamp() + $4::bigint * interval '1 microsecond')
    ON CONFLICT (key, ticket) DO UPDATE SET expires_at = EXCLUDED.expires_at
    RETURNING ticket
), mark AS (
    UPDATE {{table}} AS l
       SET contended = true
     WHERE $5::bool AND l.key = $1::text AND NOT l.contended AND l.expires_at > clock_timestamp()
    RETURNING l.mode, l.token
)
SELECT enq.ticket,
       (SELECT CASE WHEN mark.mode = 0 THEN pg_notify($6::text, mark.token::text || E'\t' || $1::text) IS NULL END FROM mark)
  FROM enq
