-- sync: raise the fence counter to at least the grant's token, and record
-- the grant's token (final: the maximum over its quorum) in the meta hash if
-- the grant still holds here. A node that granted late may have minted a
-- larger node-local token: it is replaced.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash
-- ARGV[1] handle, ARGV[2] token
local t = tonumber(ARGV[2])
if tonumber(redis.call('GET', KEYS[2]) or '0') < t then
  redis.call('SET', KEYS[2], ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('HSET', KEYS[3], 'token', ARGV[2], 'final', '1')
  return 1
end
return 0
