-- renew: compare-and-pexpire. Extends the lock only if it still holds this
-- handle with a token not newer than ours; raises the fence counter to the
-- grant's token either way. The renewing client's wanted channel replaces
-- the grant's (a lease rebuilt and renewed elsewhere is told from then on).
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash
-- ARGV[1] handle, ARGV[2] ttl (ms), ARGV[3] token, ARGV[4] wanted channel
-- Returns 0 when not held, 1 when extended, 2 when extended and a waiter
-- was refused by this grant.
local t = tonumber(ARGV[3])
if tonumber(redis.call('GET', KEYS[2]) or '0') < t then
  redis.call('SET', KEYS[2], ARGV[3])
end
if redis.call('GET', KEYS[1]) ~= ARGV[1] then
  return 0
end
local m = redis.call('HMGET', KEYS[3], 'token', 'wanted')
if tonumber(m[1] or '0') > t then
  return 0
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
redis.call('HSET', KEYS[3], 'token', ARGV[3], 'final', '1', 'notify', ARGV[4])
redis.call('PEXPIRE', KEYS[3], ARGV[2])
if m[2] == '1' then
  return 2
end
return 1
