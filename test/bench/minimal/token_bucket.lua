-- Minimal token bucket, the benchmark's floor: one string "tokens:ts"
-- set with its TTL, tokens as a float; no step-back, parameter-change or
-- upgrade handling, no exact fractions.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local rate = limit / window
local tokens = limit
local st = redis.call('GET', KEYS[1])
if st then
  local n, ts = string.match(st, '^([^:]+):(%d+)$')
  tokens = math.min(limit, tonumber(n) + (now - tonumber(ts)) * rate)
end
if tokens < cost then
  return {0, math.floor(tokens), math.ceil((cost - tokens) / rate / 1000),
          math.ceil((limit - tokens) / rate / 1000)}
end
tokens = tokens - cost
local reset = math.ceil((limit - tokens) / rate / 1000)
redis.call('SET', KEYS[1], string.format('%.17g:%d', tokens, now), 'PX', math.max(1, reset))
return {1, math.floor(tokens), 0, reset}
