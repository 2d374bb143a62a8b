-- release: compare-and-delete. Deletes the lock only if it still holds this
-- handle with a token not newer than ours, and then publishes the token on
-- the key's release channel; raises the fence counter to the grant's token
-- either way.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash, KEYS[4] the
-- handle's released tombstone
-- ARGV[1] handle, ARGV[2] token, ARGV[3] channel, ARGV[4] the grant's ttl (ms)
-- The tombstone refuses an acquire of the same handle that is still on
-- its way to this node (a late request of the round that won the grant):
-- run after the release, it would re-grant the key here, or, finding
-- another holder, tell that holder a waiter wants it.
redis.call('SET', KEYS[4], '1', 'PX', ARGV[4])
local t = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < t then
  redis.call('SET', KEYS[2], ARGV[2])
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local mt = tonumber(redis.call('HGET', KEYS[3], 'token') or '0')
if mt > t then
  return 0
end
redis.call('DEL', KEYS[1], KEYS[3])
redis.call('PUBLISH', ARGV[3], ARGV[2])
return 1
