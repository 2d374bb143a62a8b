-- release: compare-and-delete. Deletes the lock only if it still holds this
-- handle with a token not newer than ours, and then publishes the token on
-- the key's release channel; raises the fence counter to the grant's token
-- either way.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash, KEYS[4] the
-- handle's released tombstone, KEYS[5] on the first master only: the key's
-- queue of waiting Lockers (acquire.lua). When a Locker waits in it, the
-- release is published to the first of them (its wanted channel,
-- "!<released handle> <key>")
-- instead of the release channel: one Locker is woken, in queue order; a
-- Locker no longer subscribed is dropped and the next one told.
-- ARGV[1] handle, ARGV[2] token, ARGV[3] channel, ARGV[4] the grant's ttl (ms),
-- ARGV[5] the lock key; on the first master also KEYS[6] the queue's turn
-- and ARGV[6] how long (ms) the Locker told keeps it (acquire.lua)
-- Returns 0 when not held, 1 when deleted, 2 when deleted and a waiter was
-- refused by the grant (its meta hash's wanted mark).
-- The tombstone refuses an acquire of the same handle that is still on
-- its way to this node (a late request of the round that won the grant):
-- run after the release, it would re-grant the key here, or, finding
-- another holder, tell that holder a waiter wants it.
-- A grant that held a quorum without this node frees the key all the
-- same: a release that finds the key free here tells the queue too.
local function tell()
  while KEYS[5] do
    local head = redis.call('ZRANGE', KEYS[5], 0, 0)
    if #head == 0 then
      break
    end
    redis.call('ZREM', KEYS[5], head[1])
    if redis.call('PUBLISH', head[1], '!' .. ARGV[1] .. ' ' .. ARGV[5]) > 0 then
      redis.call('SET', KEYS[6], head[1], 'PX', ARGV[6])
      return true
    end
  end
  return false
end
redis.call('SET', KEYS[4], '1', 'PX', ARGV[4])
local t = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < t then
  redis.call('SET', KEYS[2], ARGV[2])
end
local cur = redis.call('GET', KEYS[1])
if cur ~= ARGV[1] then
  if not cur then
    tell()
  end
  return 0
end
local mt = tonumber(redis.call('HGET', KEYS[3], 'token') or '0')
if mt > t then
  return 0
end
local wanted = redis.call('HGET', KEYS[3], 'wanted')
redis.call('DEL', KEYS[1], KEYS[3])
if not tell() then
  redis.call('PUBLISH', ARGV[3], ARGV[2])
end
if wanted == '1' then
  return 2
end
return 1
