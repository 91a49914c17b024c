-- allow.lua
--
-- Main part of the single-limiter scripts: one key, one algorithm.
--   KEYS[1]  the limiter's state key
--   ARGV     limit, window (us), cost, pinned clock (us, 0 = Redis TIME)
--            [, burst: the capacity of token_bucket, leaky_bucket and
--            gcra; absent, the limit]
-- Reply: {allowed 0/1, remaining, retry_after_ms, reset_after_ms}.
-- The build appends "return rl_allow(KEYS, ARGV, <algorithm>)".

local function rl_allow(keys, argv, algorithm)
  if not struct then
    rl_globals()
  end
  local limit = tonumber(argv[1])
  local cost = tonumber(argv[3])
  local ok, remaining, retry, reset, state =
    algorithm(keys[1], limit, tonumber(argv[2]), cost,
              rl_clock(argv[4]), argv[5] and tonumber(argv[5]) or limit)
  -- A peek is always admitted, also when a lowered limit leaves the
  -- state above it: it consumes nothing.
  if not ok and cost > 0 then
    return {0, math.max(0, remaining), math.max(1, rl_ms(retry)), rl_ms(reset)}
  end
  if ok and state then
    rl_write(keys[1], state, reset)
  end
  return {1, math.max(0, remaining), 0, rl_ms(reset)}
end
