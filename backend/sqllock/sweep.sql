-- Delete up to 1000 expired rows, past their lock-delay, that nobody is
-- touching. Safe at any time: such a row holds nothing, and tokens come from
-- the sequence, not from the rows. Expired shared holders and waiters'
-- tickets count for nothing either: they go too.
WITH h AS (
    DELETE FROM {{holders}}
     WHERE (key, handle) IN (SELECT key, handle FROM {{holders}}
                              WHERE expires_at < clock_timestamp() LIMIT 1000 FOR UPDATE SKIP LOCKED)
       AND expires_at < clock_timestamp()
), q AS (
    DELETE FROM {{queue}}
     WHERE (key, ticket) IN (SELECT key, ticket FROM {{queue}}
                              WHERE expires_at < clock_timestamp() LIMIT 1000 FOR UPDATE SKIP LOCKED)
       AND expires_at < clock_timestamp()
)
DELETE FROM {{table}}
 WHERE key IN (SELECT key FROM {{table}}
                WHERE expires_at + lock_delay * interval '1 microsecond' < clock_timestamp()
                LIMIT 1000
                FOR UPDATE SKIP LOCKED)
   AND expires_at + lock_delay * interval '1 microsecond' < clock_timestamp()
