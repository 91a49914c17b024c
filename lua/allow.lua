-- allow.lua
--
-- Main part of the single-limiter scripts: one key, one algorithm.
--   KEYS[1]  the limiter's state key
--   ARGV     limit, window (us), cost, pinned clock (us, 0 = Redis TIME)
--            [, capacity: the burst of token_bucket, leaky_bucket and
--            gcra; absent, the limit]
--            [, flags: 'c' a named policy's limiter, whose state is
--            carried over a change of its parameters (common.lua); 'r'
--            the receipt is wanted; or 'cr'.  The capacity is then
--            always sent]
-- Reply: {allowed 0/1, remaining, retry_after_ms, reset_after_ms}, and,
-- with 'r', the receipt r1, r2 of what an admitted call took (common.lua's
-- rl_one; 0, 0 when it took nothing), asked for only by a call that a
-- refund may follow (rl_refund.c).
-- The build appends "return rl_allow(KEYS, ARGV, <algorithm>)".

local function rl_allow(keys, argv, algorithm)
  if not struct then
    rl_globals()
  end
  local limit = tonumber(argv[1])
  local cost = tonumber(argv[3])
  local flags = argv[6]
  local ok, left, retry, reset, r1, r2 =
    rl_one(keys[1], cost,
           algorithm(keys[1], limit, tonumber(argv[2]), cost,
                     rl_clock(argv[4]),
                     argv[5] and tonumber(argv[5]) or limit,
                     flags == 'c' or flags == 'cr'))
  if flags == 'r' or flags == 'cr' then
    return {ok, left, retry, reset, r1, r2}
  end
  return {ok, left, retry, reset}
end
