-- What a shared acquire meets, read after the key's advisory lock was taken
-- (shared.go): the main row, when it holds the key or is within its
-- lock-delay (mode, permits, live, microseconds until it frees, holder);
-- the number of live shared holders and microseconds until the first of
-- them expires; microseconds until the first live waiter queued ahead of
-- ticket $2 (0: any waiter) expires, NULL when none is.
--
-- $1 key  $2 ticket
SELECT m.mode, m.permits, m.live, m.micros, m.owner, m.token,
       h.n, h.first_micros, q.ahead_micros
  FROM (SELECT 1) AS one
  LEFT JOIN LATERAL (
        SELECT l.mode, l.permits, l.expires_at > clock_timestamp() AS live,
               (extract(epoch FROM (CASE WHEN l.expires_at > clock_timestamp() THEN l.expires_at
                                         ELSE l.expires_at + l.lock_delay * interval '1 microsecond' END)
                                   - clock_timestamp()) * 1000000)::bigint AS micros,
               l.owner, l.token
          FROM {{table}} AS l
         WHERE l.key = $1::text
           AND l.expires_at + l.lock_delay * interval '1 microsecond' > clock_timestamp()) AS m ON true
  LEFT JOIN LATERAL (
        SELECT count(*) AS n,
               (extract(epoch FROM min(x.expires_at) - clock_timestamp()) * 1000000)::bigint AS first_micros
          FROM {{holders}} AS x
         WHERE x.key = $1::text AND x.expires_at > clock_timestamp()) AS h ON true
  LEFT JOIN LATERAL (
        SELECT (extract(epoch FROM min(w.expires_at) - clock_timestamp()) * 1000000)::bigint AS ahead_micros
          FROM {{queue}} AS w
         WHERE w.key = $1::text AND w.expires_at > clock_timestamp()
           AND ($2::bigint = 0 OR w.ticket < $2::bigint)) AS q ON true
