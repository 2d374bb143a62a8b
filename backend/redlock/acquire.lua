-- acquire: take the lock if it is free, minting the fencing token.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash, KEYS[4] abort tombstone
-- ARGV[1] handle, ARGV[2] ttl (ms), ARGV[3] owner, ARGV[4] value, ARGV[5] min token
-- Returns {1, token, 0, ""} when granted (or already held by this handle),
-- {0, holder token, holder pttl, holder owner, holder handle} when held.
if redis.call('EXISTS', KEYS[4]) == 1 then
  return {0, 0, 0, '', ''}
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  return {1, tonumber(redis.call('HGET', KEYS[3], 'token') or '0'), 0, ''}
end
if cur then
  local m = redis.call('HMGET', KEYS[3], 'owner', 'token')
  return {0, tonumber(m[2] or '0'), redis.call('PTTL', KEYS[1]), m[1] or '', cur}
end
local f = redis.call('INCR', KEYS[2])
local min = tonumber(ARGV[5])
if f <= min then
  f = min + 1
  redis.call('SET', KEYS[2], f)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
-- all three fields are written: no stale value survives from an older grant
redis.call('HSET', KEYS[3], 'owner', ARGV[3], 'token', f, 'value', ARGV[4], 'final', '0')
redis.call('PEXPIRE', KEYS[3], ARGV[2])
return {1, f, 0, ''}
