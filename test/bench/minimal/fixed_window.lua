-- Minimal fixed window, the benchmark's floor (test/bench/redis_time.sh):
-- the same KEYS/ARGV and reply as lua/, the Redis clock, one string
-- "start:used" set with its TTL; no step-back, parameter-change or upgrade
-- handling.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local start = now - now % window
local used = 0
local st = redis.call('GET', KEYS[1])
if st then
  local w, n = string.match(st, '^(%d+):(%d+)$')
  if tonumber(w) == start then
    used = tonumber(n)
  end
end
local reset = math.ceil((start + window - now) / 1000)
if used + cost > limit then
  return {0, limit - used, reset, reset}
end
used = used + cost
redis.call('SET', KEYS[1], string.format('%d:%d', start, used), 'PX', reset)
return {1, limit - used, 0, reset}
