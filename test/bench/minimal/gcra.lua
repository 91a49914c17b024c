-- Minimal GCRA, the benchmark's floor: the theoretical arrival time as
-- one number set with its TTL, the emission interval as a float; no
-- step-back, parameter-change or upgrade handling, no exact fractions.
local limit, window, cost = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local t = redis.call('TIME')
local now = t[1] * 1000000 + t[2]
local interval = window / limit
local tat = tonumber(redis.call('GET', KEYS[1])) or now
if tat < now then
  tat = now
end
local after = tat + cost * interval
if after - now > window then
  return {0, math.floor((window - (tat - now)) / interval),
          math.ceil((after - now - window) / 1000), math.ceil((tat - now) / 1000)}
end
local reset = math.ceil((after - now) / 1000)
redis.call('SET', KEYS[1], string.format('%.17g', after), 'PX', math.max(1, reset))
return {1, math.floor((window - (after - now)) / interval), 0, reset}
