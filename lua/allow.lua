-- allow.lua
--
-- Main part of the single-limiter scripts: one key, one algorithm.
--   KEYS[1]  the limiter's state key
--   ARGV     limit, window (us), cost, pinned clock (us, 0 = Redis TIME)
--            [, burst: the capacity of token_bucket, leaky_bucket and
--            gcra; absent, the limit]
-- Reply: {allowed 0/1, remaining, retry_after_ms, reset_after_ms}.
-- The build appends "return rl_allow(<algorithm>)".

local function rl_allow(algorithm)
  local limit = tonumber(ARGV[1])
  local window = tonumber(ARGV[2])
  local cost = tonumber(ARGV[3])
  local now = rl_clock(ARGV[4])
  local burst = tonumber(ARGV[5]) or limit
  local ok, remaining, retry, reset, apply =
    algorithm(KEYS[1], limit, window, cost, now, burst)
  -- A peek is always admitted, also when a lowered limit leaves the
  -- state above it: it consumes nothing.
  if not ok and cost > 0 then
    return {0, math.max(0, remaining), math.max(1, rl_ms(retry)), rl_ms(reset)}
  end
  if ok and apply then
    apply()
  end
  return {1, math.max(0, remaining), 0, rl_ms(reset)}
end
