-- Delete up to 1000 expired rows that nobody is touching. Safe at any time:
-- an expired row holds nothing, and tokens come from the sequence, not from
-- the rows.
DELETE FROM {{table}}
 WHERE key IN (SELECT key FROM {{table}}
                WHERE expires_at < clock_timestamp()
                LIMIT 1000
                FOR UPDATE SKIP LOCKED)
   AND expires_at < clock_timestamp()
