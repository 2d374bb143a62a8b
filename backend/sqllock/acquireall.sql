-- One all-or-nothing attempt at several keys, the second statement of a
-- transaction whose first (fence below) took the keys' advisory locks:
-- each key row is inserted, or an expired one past its lock-delay taken
-- over, exactly as acquire.sql does for one key, and RETURNING lists the
-- keys granted. The caller commits only when every key came back and rolls
-- back otherwise: the transaction holds all the keys or none.
--
-- $1 keys  $2 handles (one per key)  $3 owner  $4 value  $5 ttl in
-- microseconds  $6 lock-delay in microseconds
INSERT INTO {{table}} AS l (key, owner, handle, token, value, acquired_at, expires_at, lock_delay)
SELECT u.k, $3::text, u.h, nextval({{seqlit}}), $4::bytea,
       clock_timestamp(), clock_timestamp() + $5::bigint * interval '1 microsecond', $6::bigint
  FROM unnest($1::text[], $2::text[]) WITH ORDINALITY AS u(k, h, i)
 -- no waiter queued (queue.go): multi-key callers do not queue, they wait
 -- until every key is free of holders and waiters
 WHERE NOT EXISTS (SELECT 1 FROM {{queue}} AS q WHERE q.key = u.k AND q.expires_at > clock_timestamp())
    OR EXISTS (SELECT 1 FROM {{table}} AS o WHERE o.key = u.k AND o.handle = u.h)
 ORDER BY u.i
ON CONFLICT (key) DO UPDATE
{{takeover}}
 WHERE l.handle = EXCLUDED.handle
    OR (l.expires_at + l.lock_delay * interval '1 microsecond' <= clock_timestamp()
        AND NOT EXISTS (SELECT 1 FROM {{queue}} AS q WHERE q.key = l.key AND q.expires_at > clock_timestamp()))
RETURNING key, token, contended
