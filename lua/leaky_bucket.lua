-- leaky_bucket.lua
--
-- Leaky bucket used as a policer: each call pours `cost` units into a
-- bucket of size `burst` (the limit unless the caller set one) that drains continuously at `limit` per window
-- and starts empty; a call that would overflow the bucket is refused.
--
-- State: rl_state(level, ts, unit), level = units x unit at time ts,
-- unit = the scale (window / gcd(limit, window)) the level is kept in
-- (0.2.0: hash {level, ts, unit}).  A level written under other
-- parameters is cut to a full bucket of the current ones as of ts, then
-- drains: no earlier call can make a later one wait longer than its own
-- cost needs.
--
-- A policy's state (carry): rl_carry_state(level, ts, unit, rate).  A
-- level the old rate had drained by now is none; else the level is kept
-- in the current scale (rounded up), at most a full bucket, and drains
-- from ts at the current rate.

local function leaky_bucket(key, limit, window, cost, now, burst, carry)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- one unit, in level
  local rate = limit / g                -- level drained per microsecond
  local capacity = burst                -- units the bucket holds
  local full = capacity * unit
  local level, ts = 0, now
  local l, t, was
  if carry then
    local wrate
    l, t, was, wrate = rl_carry_read(key)
    if l and (now - t) * wrate < l then
      local kept = math.min(full, rl_up(l, was, unit))
      if kept ~= l or was ~= unit or wrate ~= rate then
        rl_write(key, rl_carry_state(kept, t, unit, rate),
                 t + kept / rate - now)
      end
      l, was = kept, unit
    else
      l = nil
    end
  else
    l, t, was = rl_read(key, 'level', 'ts', 'unit')
  end
  if l then
    level, ts = l, t
    -- Kept in another scale when the limit or window changed: convert,
    -- rounding up.
    if was ~= unit then
      level = math.ceil(level / was * unit)
    end
    if level > full then
      level = full
    end
    -- A clock that moved back drains nothing.
    if now > ts then
      level = math.max(0, level - (now - ts) * rate)
      ts = now
    end
  end

  local shift = ts - now                -- > 0 only after a step back
  local pour = cost * unit
  if level + pour > full then
    return false, math.floor(math.max(0, full - level) / unit),
           shift + (level + pour - full) / rate, shift + level / rate, nil
  end

  level = level + pour
  local reset = 0
  if level > 0 then
    reset = shift + level / rate
  end
  local state = nil
  if cost > 0 then
    if carry then
      state = rl_carry_state(level, ts, unit, rate)
    else
      state = rl_state(level, ts, unit)
    end
  end
  -- The receipt: the state's time and its level (refund below).
  return true, math.floor((full - level) / unit), 0, reset, state, ts, level
end

-- Gives back what an admitted call took (refund.lua), its receipt r1, r2
-- the state's time and level: rl_refund_give's share of its cost out of
-- the bucket as the state holds it, at its own time ts.  A bucket empty by
-- now is a fresh one: the key goes.  A state in another scale than the
-- call's has nothing known to give back.  True when the state changed.
local function leaky_bucket_refund(key, limit, window, capacity, carry, cost,
                                   r1, r2, now)
  if cost <= 0 then
    return false
  end
  local g = rl_gcd(limit, window)
  local unit, rate = window / g, limit / g
  local level, ts, was, wrate
  if carry then
    level, ts, was, wrate = rl_refund_read(key, 2, 4)
  else
    level, ts, was = rl_refund_read(key, 1, 3)
    wrate = rate
  end
  if not level or level <= 0 or was ~= unit or wrate ~= rate then
    return false
  end
  local give = rl_refund_give(cost, unit, rate, r1, r2, ts)
  if give <= 0 then
    return false
  end
  level = math.max(0, level - give)
  if level <= math.max(0, now - ts) * rate then
    return rl_refund_write(key, nil)
  end
  if carry then
    return rl_refund_write(key, rl_carry_state(level, ts, unit, rate))
  end
  return rl_refund_write(key, rl_state(level, ts, unit))
end
