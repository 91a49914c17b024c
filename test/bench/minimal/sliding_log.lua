-- Minimal sliding log, the benchmark's floor: one member per call scored
-- by its time, everything expired removed at once, the wait read from the
-- member that must leave; no bounded pruning, step-back or upgrade handling.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local key = KEYS[1]
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
redis.call('ZREMRANGEBYSCORE', key, '-inf', now - window)
local used = redis.call('ZCARD', key)
if used + cost > limit then
  local m = redis.call('ZRANGE', key, used + cost - limit - 1, used + cost - limit - 1, 'WITHSCORES')
  local wait = math.ceil((tonumber(m[2]) + window - now) / 1000)
  return {0, limit - used, math.max(1, wait), wait}
end
redis.call('ZADD', key, now, string.format('%d:%d', now, used))
redis.call('PEXPIRE', key, math.ceil(window / 1000))
return {1, limit - used - cost, 0, math.ceil(window / 1000)}
