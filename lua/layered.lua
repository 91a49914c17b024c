-- layered.lua
--
-- Main part of the layered script: several rules checked together and
-- consumed only if every rule admits its cost, so no rule's counter is
-- polluted by a call another rule refused.  Two callers use it:
--   rl_allow_layered   several rules (algorithm, limit, window) for one
--                      key, all with the same cost, all keys under that
--                      key's hash tag;
--   rl_throttle_statement  one rule per key of a statement's rows, each
--                      with its own cost (the rows for that key).
--   KEYS[i]  rule i's state key
--   ARGV     pinned clock (us, 0 = Redis TIME), then a mark and the rules:
--            '+', then per rule: algorithm, limit, window (us), cost,
--            burst;
--            or, when every rule has the same limiter (a statement):
--            '=', algorithm, limit, window (us), burst, then each rule's
--            cost.  burst is the capacity (the limit when none was set).
--            '?' instead of '=': the same, but only checked, nothing is
--            consumed (the first round of a statement over many slots);
--            '*' instead of '=': each key its own check, as allow.lua
--            checks one (a batch: rl_allow_many's keys of one node).
--            '+r', '=r', '*r': the same, and the receipts are wanted.
--   An algorithm's name followed by '!' (in either form) is a named
--   policy's limiter, whose state is carried over a change of its
--   parameters (common.lua).
-- Reply: {allowed 0/1, remaining, retry_after_ms, reset_after_ms,
--         index of the most restrictive rule (1-based)}, followed, when
--         the receipts are wanted and the rules were admitted, by each
--         rule's receipt r1, r2 (common.lua's rl_one; 0, 0 for a rule that
--         took nothing): 5 + 2 x #KEYS elements; with '*', for each key,
--         one key after the other, allow.lua's four, or six with 'r'.
-- When refused, remaining and reset_after_ms describe the state as it is
-- (nothing was consumed), and retry_after_ms is the largest wait among
-- the refusing rules: after it every rule admits the call.

local RL_ALGORITHMS = {
  fixed_window = fixed_window,
  sliding_log = sliding_log,
  sliding_counter = sliding_counter,
  token_bucket = token_bucket,
  leaky_bucket = leaky_bucket,
  gcra = gcra,
  concurrency = concurrency,
}
local RL_CARRIED = {
  ['fixed_window!'] = fixed_window,
  ['sliding_log!'] = sliding_log,
  ['sliding_counter!'] = sliding_counter,
  ['token_bucket!'] = token_bucket,
  ['leaky_bucket!'] = leaky_bucket,
  ['gcra!'] = gcra,
  ['concurrency!'] = concurrency,
}

-- The algorithm a name says, and whether it is a policy's (carry).
local function rl_algorithm_of(name)
  local a = RL_ALGORITHMS[name]
  if a then
    return a, false
  end
  return RL_CARRIED[name], true
end

local function rl_layered(KEYS, ARGV)
  if not struct then
    rl_globals()
  end
  local now = rl_clock(ARGV[1])
  local all_ok = true
  local results = {}
  -- A statement's rules share their limit and window: parse each text once.
  local parsed = {}
  local function num(text)
    local v = parsed[text]
    if v == nil then
      v = tonumber(text)
      parsed[text] = v
    end
    return v
  end

  local mark = ARGV[2]
  local receipts = mark == '+r' or mark == '=r' or mark == '*r'
  local check_only = mark == '?'
  local each = mark == '*' or mark == '*r'
  local uniform = mark == '=' or mark == '=r' or check_only or each
  local width = receipts and 6 or 4

  for i = 1, #KEYS do
    local algorithm, limit, window, cost, burst, carry
    if uniform then
      algorithm, carry = rl_algorithm_of(ARGV[3])
      limit = num(ARGV[4])
      window = num(ARGV[5])
      burst = num(ARGV[6])
      cost = num(ARGV[6 + i])
    else
      local base = 5 * i - 2
      algorithm, carry = rl_algorithm_of(ARGV[base])
      limit = num(ARGV[base + 1])
      window = num(ARGV[base + 2])
      cost = num(ARGV[base + 3])
      burst = num(ARGV[base + 4])
    end
    if each then
      local b = width * (i - 1)
      local ok, left, wait, reset, r1, r2 =
        rl_one(KEYS[i], cost,
               algorithm(KEYS[i], limit, window, cost, now, burst, carry))
      results[b + 1], results[b + 2], results[b + 3], results[b + 4] =
        ok, left, wait, reset
      if receipts then
        results[b + 5], results[b + 6] = r1, r2
      end
    else
      local ok, left, wait, fresh, state, r1, r2 =
        algorithm(KEYS[i], limit, window, cost, now, burst, carry)
      -- A rule asked for nothing admits (a peek), whatever its state.
      if cost == 0 then
        ok = true
      end
      if not ok then
        all_ok = false
      end
      results[i] = {ok, left, wait, fresh, state, algorithm, limit, window,
                    burst, carry, cost > 0 and r1 or 0, cost > 0 and r2 or 0}
    end
  end
  if each then
    return results
  end

  local remaining, retry, reset, tightest = nil, 0, 0, 1
  if all_ok then
    for i, r in ipairs(results) do
      local left = math.max(0, r[2])
      if remaining == nil or left < remaining then
        remaining = left
        tightest = i
      end
      reset = math.max(reset, rl_ms(r[4]))
    end
    local reply = {1, remaining, 0, reset, tightest}
    if not check_only then
      for i, r in ipairs(results) do
        if r[5] then
          rl_write(KEYS[i], r[5], r[4])
        end
        if receipts then
          reply[4 + 2 * i], reply[5 + 2 * i] = r[11], r[12]
        end
      end
    end
    return reply
  end

  for i, r in ipairs(results) do
    local left, fresh = r[2], r[4]
    if r[1] then
      -- This rule admitted the call, but nothing is consumed: report its
      -- state as it stands, not as it would be after the call.
      local _
      _, left, _, fresh = r[6](KEYS[i], r[7], r[8], 0, now, r[9], r[10])
    else
      local wait = math.max(1, rl_ms(r[3]))
      if wait > retry then
        retry = wait
        tightest = i
      end
    end
    left = math.max(0, left)
    if remaining == nil or left < remaining then
      remaining = left
    end
    reset = math.max(reset, rl_ms(fresh))
  end
  return {0, remaining, retry, reset, tightest}
end
