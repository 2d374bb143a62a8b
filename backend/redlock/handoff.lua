-- handoff: pass a held lock straight to the next waiter of the same client,
-- without freeing it in between: compare the old handle (and token), mint
-- the new grant's token and replace the lock, all atomically. Waiters that
-- the old grant refused still wait (they retry only after a real release):
-- its "wanted" mark carries over to the new grant.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash
-- ARGV[1] old handle, ARGV[2] old token, ARGV[3] new handle, ARGV[4] ttl (ms),
-- ARGV[5] owner, ARGV[6] value, ARGV[7] the client's wanted channel
-- Returns {1, new token, wanted} or {0, 0, "0"} when the old grant no longer
-- holds here.
local t = tonumber(ARGV[2])
local f = tonumber(redis.call('GET', KEYS[2]) or '0')
if f < t then
  f = t
  redis.call('SET', KEYS[2], f)
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return {0, 0, '0'}
end
local m = redis.call('HMGET', KEYS[3], 'token', 'wanted')
if tonumber(m[1] or '0') > t then
  return {0, 0, '0'}
end
local wanted = m[2] or '0'
f = f + 1
redis.call('SET', KEYS[2], f)
redis.call('SET', KEYS[1], ARGV[3], 'PX', ARGV[4])
redis.call('HSET', KEYS[3], 'owner', ARGV[5], 'token', f, 'value', ARGV[6], 'final', '0',
  'notify', ARGV[7], 'wanted', wanted)
redis.call('PEXPIRE', KEYS[3], ARGV[4])
return {1, f, wanted}
