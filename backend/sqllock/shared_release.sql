-- The release of a shared grant, in a transaction holding the key's
-- advisory lock: its holder row is deleted, and the main row keeps the
-- latest expiry of the holders left, or is deleted with the last of them.
-- The key's waiters are notified when a waiter marked the row or is queued.
-- held is false for a holder row that had expired. No row: the grant was
-- not found.
--
-- $1 key  $2 handle  $3 token  $4 channel
WITH d AS (
    DELETE FROM {{holders}}
     WHERE key = $1::text AND handle = $2::text AND token = $3::bigint
    RETURNING expires_at > clock_timestamp() AS held
), rest AS (
    SELECT (SELECT max(x.expires_at) FROM {{holders}} AS x
             WHERE x.key = $1::text AND x.handle <> $2::text AND x.expires_at > clock_timestamp()) AS latest
      FROM d
), upd AS (
    UPDATE {{table}} AS l SET expires_at = rest.latest
      FROM rest
     WHERE l.key = $1::text AND l.mode = 1 AND rest.latest IS NOT NULL
    RETURNING l.contended
), del AS (
    DELETE FROM {{table}} AS l USING rest
     WHERE l.key = $1::text AND l.mode = 1 AND rest.latest IS NULL
    RETURNING l.contended
)
SELECT d.held,
       CASE WHEN coalesce((SELECT bool_or(c) FROM (SELECT contended AS c FROM upd UNION ALL SELECT contended FROM del) AS x), false)
              OR EXISTS (SELECT 1 FROM {{queue}} AS w WHERE w.key = $1::text AND w.expires_at > clock_timestamp())
            THEN pg_notify($4::text, $1::text) IS NULL END
  FROM d
