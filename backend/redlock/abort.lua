-- abort: undo a failed acquire attempt. Deletes the lock if this handle
-- holds it and, when ARGV[3] is "1" (the node did not answer the attempt),
-- leaves a tombstone for the attempt so that an acquire still queued on the
-- node is refused when it finally runs.
-- KEYS[1] lock, KEYS[2] meta hash, KEYS[3] abort tombstone
-- ARGV[1] handle, ARGV[2] ttl (ms), ARGV[3] "1" to leave the tombstone
if ARGV[3] == '1' then
  redis.call('SET', KEYS[3], '1', 'PX', ARGV[2])
end
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1], KEYS[2])
  return 1
end
return 0
