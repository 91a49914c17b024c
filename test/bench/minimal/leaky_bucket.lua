-- Minimal leaky bucket (policer), the benchmark's floor: one string
-- "level:ts" set with its TTL, the level as a float; no step-back,
-- parameter-change or upgrade handling, no exact fractions.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local rate = limit / window
local level = 0
local st = redis.call('GET', KEYS[1])
if st then
  local n, ts = string.match(st, '^([^:]+):(%d+)$')
  level = math.max(0, tonumber(n) - (now - tonumber(ts)) * rate)
end
if level + cost > limit then
  return {0, math.floor(limit - level), math.ceil((level + cost - limit) / rate / 1000),
          math.ceil(level / rate / 1000)}
end
level = level + cost
local reset = math.ceil(level / rate / 1000)
redis.call('SET', KEYS[1], string.format('%.17g:%d', level, now), 'PX', math.max(1, reset))
return {1, math.floor(limit - level), 0, reset}
