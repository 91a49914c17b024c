-- refund.lua
--
-- Main part of the refund script: gives back what admitted calls took,
-- when the transaction that made them aborted (src/rl_refund.c).  Each
-- key is one admitted rule; its algorithm's refund function undoes the
-- call's cost as exactly as the state still allows, and never gives more
-- room than a fresh limiter has.
--   KEYS[i]  rule i's state key
--   ARGV     pinned clock (us, 0 = Redis TIME), then per key: algorithm
--            (followed by '!' for a named policy's limiter, whose state
--            is carried: common.lua), limit, window (us), capacity (the
--            burst, or the limit), cost, and the receipt r1, r2 the
--            check's reply gave (allow.lua, layered.lua).
-- Reply: for each key, 1 if its state changed, 0 if there was nothing
-- left to give back (the key expired, the window charged has passed).

local RL_REFUNDS = {
  fixed_window = fixed_window_refund,
  sliding_counter = sliding_counter_refund,
  token_bucket = token_bucket_refund,
  leaky_bucket = leaky_bucket_refund,
  gcra = gcra_refund,
}

-- The algorithms whose refunds of one key go together, in one pass over
-- the log (sliding_log_refund_many): each refund rewrites the members
-- after it, so one at a time would rewrite them once per refund.
local RL_LOGS = {sliding_log = true, concurrency = true}

local function rl_refund(KEYS, ARGV)
  if not struct then
    rl_globals()
  end
  local now = rl_clock(ARGV[1])
  local out = {}
  local logs, order = {}, {}
  for i = 1, #KEYS do
    local b = 7 * i - 5
    local name, carry = ARGV[b], false
    if string.byte(name, -1) == 33 then  -- '!'
      name, carry = string.sub(name, 1, -2), true
    end
    local refund = RL_REFUNDS[name]
    if not refund and not RL_LOGS[name] then
      return redis.error_reply('ERR ratelimit: unknown algorithm in refund')
    end
    if RL_LOGS[name] then
      local g = logs[KEYS[i]]
      if not g then
        g = {items = {}, at = {}, n = 0}
        logs[KEYS[i]] = g
        order[#order + 1] = KEYS[i]
      end
      g.n = g.n + 1
      g.items[g.n] = {tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]),
                      tonumber(ARGV[b + 4])}
      g.at[g.n] = i
    else
      local changed = refund(KEYS[i], tonumber(ARGV[b + 1]),
                             tonumber(ARGV[b + 2]), tonumber(ARGV[b + 3]),
                             carry, tonumber(ARGV[b + 4]),
                             tonumber(ARGV[b + 5]), tonumber(ARGV[b + 6]),
                             now)
      out[i] = changed and 1 or 0
    end
  end
  for _, key in ipairs(order) do
    local g = logs[key]
    local changed = sliding_log_refund_many(key, g.items, g.n) and 1 or 0
    for j = 1, g.n do
      out[g.at[j]] = changed
    end
  end
  return out
end
