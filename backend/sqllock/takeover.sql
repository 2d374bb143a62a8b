-- The SET list of ON CONFLICT (key) DO UPDATE in acquire.sql and
-- acquireall.sql, which name it takeover in double braces: the key row
-- becomes the new exclusive grant. A row held under the same handle (a
-- re-sent acquire) keeps its token and its mark; a takeover starts afresh:
-- waiters that still want the key find it held again and mark it again.
-- It is inserted as is: no names are filled in here.
   SET owner       = EXCLUDED.owner,
       handle      = EXCLUDED.handle,
       token       = CASE WHEN l.handle = EXCLUDED.handle THEN l.token ELSE EXCLUDED.token END,
       value       = EXCLUDED.value,
       acquired_at = EXCLUDED.acquired_at,
       expires_at  = EXCLUDED.expires_at,
       lock_delay  = EXCLUDED.lock_delay,
       mode        = 0,
       permits     = 0,
       contended   = l.contended AND l.handle = EXCLUDED.handle
