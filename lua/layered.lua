-- layered.lua
--
-- Main part of the layered script: several rules for one caller, checked
-- together and consumed only if every rule admits the call, so no rule's
-- counter is polluted by a call another rule refused.
--   KEYS[i]  rule i's state key (all under the caller's hash tag)
--   ARGV     pinned clock (us, 0 = Redis TIME), cost, then per rule:
--            algorithm, limit, window (us)
-- Reply: {allowed 0/1, remaining, retry_after_ms, reset_after_ms,
--         index of the most restrictive rule (1-based)}.

local RL_ALGORITHMS = {
  fixed_window = fixed_window,
  sliding_log = sliding_log,
  sliding_counter = sliding_counter,
  token_bucket = token_bucket,
  leaky_bucket = leaky_bucket,
  gcra = gcra,
}

local function rl_layered()
  local now = rl_clock(ARGV[1])
  local cost = tonumber(ARGV[2])
  local all_ok = true
  local remaining, retry, reset, tightest = nil, 0, 0, 1
  local applies = {}

  for i = 1, #KEYS do
    local base = 3 * i
    local algorithm = RL_ALGORITHMS[ARGV[base]]
    local ok, left, wait, fresh, apply =
      algorithm(KEYS[i], tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]),
                cost, now)
    left = math.max(0, left)
    if not ok then
      wait = math.max(1, rl_ms(wait))
      if all_ok or wait > retry then
        retry = wait
        tightest = i
      end
      all_ok = false
    elseif all_ok and (remaining == nil or left < remaining) then
      tightest = i
    end
    if remaining == nil or left < remaining then
      remaining = left
    end
    reset = math.max(reset, rl_ms(fresh))
    applies[#applies + 1] = apply
  end

  if not all_ok then
    return {0, remaining, retry, reset, tightest}
  end
  for _, apply in ipairs(applies) do
    apply()
  end
  return {1, remaining, 0, reset, tightest}
end
