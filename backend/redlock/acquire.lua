-- acquire: take the lock if it is free, minting the fencing token.
-- KEYS[1] lock, KEYS[2] fence counter, KEYS[3] meta hash, KEYS[4] abort tombstone,
-- KEYS[5] the handle's released tombstone (release.lua)
-- ARGV[1] handle, ARGV[2] ttl (ms), ARGV[3] owner, ARGV[4] value, ARGV[5] min token,
-- ARGV[6] the caller's wanted channel (recorded with a grant), ARGV[7] "1" when
-- the caller will wait if refused, ARGV[8] the lock key
-- On the first master only (see firstmaster.go): KEYS[6] the key's queue of
-- waiting Lockers (a sorted set of their wanted channels by ticket), KEYS[7]
-- its turn (the wanted channel of the Locker told last, for a short while),
-- ARGV[9] the caller's ticket: "" to stay out of the queue, "0" for a new one
-- (the server's time in microseconds). While the turn is another Locker's,
-- a free key is refused here as {0, 0, turn pttl, "", "", ticket}.
-- Returns {1, token, 0, "", wanted} when granted (or already held by this
-- handle; wanted is "1" when a waiter was refused by this grant),
-- {0, holder token, holder pttl, holder owner, holder handle, ticket} when
-- held (ticket: the caller's place in the queue, "" when not queued).
-- A refusal of a caller that will wait tells the holder: it publishes
-- "<holder handle> <key>" on the holder's wanted channel and marks the grant
-- wanted.
-- queue: a refused caller that will wait joins the queue, keeping its
-- ticket; returns the ticket ("" when not queued).
local function queue()
  if ARGV[7] ~= '1' or not KEYS[6] or not ARGV[9] or ARGV[9] == '' then
    return ''
  end
  local ticket = ARGV[9]
  if ticket == '0' then
    local t = redis.call('TIME')
    ticket = t[1] .. string.format('%06d', tonumber(t[2]))
  end
  redis.call('ZADD', KEYS[6], 'NX', ticket, ARGV[6])
  if redis.call('PTTL', KEYS[6]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[6], ARGV[2])
  end
  return tostring(redis.call('ZSCORE', KEYS[6], ARGV[6]))
end
if redis.call('EXISTS', KEYS[4]) == 1 or redis.call('EXISTS', KEYS[5]) == 1 then
  return {0, 0, 0, '', ''}
end
local cur = redis.call('GET', KEYS[1])
if cur == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  redis.call('PEXPIRE', KEYS[3], ARGV[2])
  local m = redis.call('HMGET', KEYS[3], 'token', 'wanted')
  return {1, tonumber(m[1] or '0'), 0, '', m[2] or '0'}
end
if cur then
  local m = redis.call('HMGET', KEYS[3], 'owner', 'token', 'notify')
  -- m[2] is set whenever the meta hash exists: HSET never creates one
  -- without its PX here
  if ARGV[7] == '1' and m[2] then
    redis.call('HSET', KEYS[3], 'wanted', '1')
    if m[3] then
      redis.call('PUBLISH', m[3], cur .. ' ' .. ARGV[8])
    end
  end
  return {0, tonumber(m[2] or '0'), redis.call('PTTL', KEYS[1]), m[1] or '', cur, queue()}
end
if KEYS[7] then
  local turn = redis.call('GET', KEYS[7])
  if turn and turn ~= ARGV[6] then
    return {0, 0, redis.call('PTTL', KEYS[7]), '', '', queue()}
  end
  redis.call('DEL', KEYS[7])
end
local f = redis.call('INCR', KEYS[2])
local min = tonumber(ARGV[5])
if f <= min then
  f = min + 1
  redis.call('SET', KEYS[2], f)
end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
-- every field is written: no stale value survives from an older grant
redis.call('HSET', KEYS[3], 'owner', ARGV[3], 'token', f, 'value', ARGV[4], 'final', '0',
  'notify', ARGV[6], 'wanted', '0')
redis.call('PEXPIRE', KEYS[3], ARGV[2])
if KEYS[6] then
  redis.call('ZREM', KEYS[6], ARGV[6])
end
return {1, f, 0, '', '0'}
