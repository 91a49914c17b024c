-- allow.lua
--
-- Main part of the single-limiter scripts: one key, one algorithm.
--   KEYS[1]  the limiter's state key
--   ARGV     limit, window (us), cost, pinned clock (us, 0 = Redis TIME)
--            [, burst: the capacity of token_bucket, leaky_bucket and
--            gcra; absent, the limit]
--            [, 'c': a named policy's limiter, whose state is carried
--            over a change of its parameters (common.lua); the burst is
--            then always sent]
-- Reply: {allowed 0/1, remaining, retry_after_ms, reset_after_ms, r1, r2},
-- r1, r2 the receipt of what an admitted call took (common.lua's rl_one;
-- 0, 0 when it took nothing).
-- The build appends "return rl_allow(KEYS, ARGV, <algorithm>)".

local function rl_allow(keys, argv, algorithm)
  if not struct then
    rl_globals()
  end
  local limit = tonumber(argv[1])
  local cost = tonumber(argv[3])
  return {rl_one(keys[1], cost,
                 algorithm(keys[1], limit, tonumber(argv[2]), cost,
                           rl_clock(argv[4]),
                           argv[5] and tonumber(argv[5]) or limit,
                           argv[6] == 'c'))}
end
