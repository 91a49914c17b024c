-- Minimal sliding window counter, the benchmark's floor: one string
-- "start:cur:prev" set with its TTL, floating-point weights; no step-back,
-- parameter-change or upgrade handling.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local start = now - now % window
local cur, prev = 0, 0
local st = redis.call('GET', KEYS[1])
if st then
  local w, c, p = string.match(st, '^(%d+):(%d+):(%d+)$')
  w = tonumber(w)
  if w == start then
    cur, prev = tonumber(c), tonumber(p)
  elseif w == start - window then
    prev = tonumber(c)
  end
end
local left = window - (now - start)
local used = cur + prev * left / window
if used + cost > limit then
  return {0, math.max(0, math.floor(limit - used)), math.ceil(left / 1000),
          math.ceil((left + window) / 1000)}
end
local reset = math.ceil((left + window) / 1000)
redis.call('SET', KEYS[1], string.format('%d:%d:%d', start, cur + cost, prev), 'PX', reset)
return {1, math.max(0, math.floor(limit - used - cost)), 0, reset}
