-- abort: undo a failed acquire attempt. Deletes the lock if this handle
-- holds it and, when ARGV[3] is "1" (the node did not answer the attempt),
-- leaves a tombstone for the attempt so that an acquire still queued on the
-- node is refused when it finally runs.
-- KEYS[1] lock, KEYS[2] meta hash, KEYS[3] abort tombstone
-- ARGV[1] handle, ARGV[2] ttl (ms), ARGV[3] "1" to leave the tombstone
-- On the first master only (see acquire.lua): KEYS[4] the key's queue of
-- waiting Lockers, ARGV[4] the caller's wanted channel, ARGV[5] its ticket
-- ("" for none): a waiter whose attempt the queue's grant had taken it out
-- of gets its place back.
if ARGV[3] == '1' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
end
if KEYS[4] and ARGV[5] and ARGV[5] ~= '' and ARGV[5] ~= '0' then
  redis.call('ZADD', KEYS[4], 'NX', ARGV[5], ARGV[4])
  if redis.call('PTTL', KEYS[4]) < tonumber(ARGV[2]) then
    redis.call('PEXPIRE', KEYS[4], ARGV[2])
  end
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
