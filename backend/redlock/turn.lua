-- turn: a Locker leaves the first master's queue of a key (see
-- acquire.lua), and passes the turn on if it may have been told it: when
-- the key is free, the next Locker in the queue is told ("! <key>" on its
-- wanted channel), or, with none left, the release channel hears the fence
-- counter (a token no grant made here after it is below).
-- KEYS[1] lock, KEYS[2] the queue, KEYS[3] fence counter, KEYS[4] the
-- queue's turn (acquire.lua)
-- ARGV[1] the leaving Locker's wanted channel, ARGV[2] the release
-- channel, ARGV[3] the lock key, ARGV[4] how long (ms) the Locker told
-- keeps the turn
redis.call('ZREM', KEYS[2], ARGV[1])
if redis.call('EXISTS', KEYS[1]) == 1 then
  return 0
end
local turn = redis.call('GET', KEYS[4])
if turn and turn ~= ARGV[1] then
  return 0
end
while true do
  local head = redis.call('ZRANGE', KEYS[2], 0, 0)
  if #head == 0 then
    break
  end
  redis.call('ZREM', KEYS[2], head[1])
  if redis.call('PUBLISH', head[1], '! ' .. ARGV[3]) > 0 then
    redis.call('SET', KEYS[4], head[1], 'PX', ARGV[4])
    return 1
  end
end
redis.call('DEL', KEYS[4])
redis.call('PUBLISH', ARGV[2], redis.call('GET', KEYS[3]) or '0')
return 0
