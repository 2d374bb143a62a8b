-- inspect: the holder as this node sees it.
-- KEYS[1] lock, KEYS[2] meta hash
-- Returns false when free, else {handle, owner, token, value, pttl, final}.
local h = redis.call('GET', KEYS[1])
if not h then
  return false
end
local m = redis.call('HMGET', KEYS[2], 'owner', 'token', 'value', 'final')
return {h, m[1] or '', tonumber(m[2] or '0'), m[3] or '', redis.call('PTTL', KEYS[1]), m[4] or '0'}
