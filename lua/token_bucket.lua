-- token_bucket.lua
--
-- Token bucket: capacity `burst` (the limit unless the caller set one),
-- refilled continuously at `limit` per window, starting full.  A call takes `cost` tokens if the bucket holds
-- them.
--
-- State: rl_state(credit, ts, unit), credit = tokens x unit at time
-- ts, unit = the scale (window / gcd(limit, window)) the credit is kept
-- in (0.2.0: hash {credit, ts, unit}).
--
-- A policy's state (carry): rl_carry_state(debt, ts, unit, rate), the
-- tokens missing at ts (x unit) and the scale and rate they were kept
-- in.  A debt the old rate had paid off by now is none; else the debt is
-- kept in the current scale (rounded up), at most a whole bucket (a
-- bucket is no emptier than empty), and paid off from ts at the current
-- rate.

local function token_bucket(key, limit, window, cost, now, burst, carry)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- one token, in credit
  local rate = limit / g                -- credit gained per microsecond
  local capacity = burst                -- tokens the bucket holds
  local full = capacity * unit
  local credit, ts = full, now
  local c, t, was
  if carry then
    local d, wrate
    d, t, was, wrate = rl_carry_read(key)
    if d and (now - t) * wrate < d then
      local debt = math.min(full, rl_up(d, was, unit))
      if debt ~= d or was ~= unit or wrate ~= rate then
        rl_write(key, rl_carry_state(debt, t, unit, rate),
                 t + debt / rate - now)
      end
      -- Read below as a credit kept in the current scale.
      c, was = full - debt, unit
    end
  else
    c, t, was = rl_read(key, 'credit', 'ts', 'unit')
  end
  if c then
    credit, ts = c, t
    -- Kept in another scale when the limit or window changed: convert,
    -- rounding down.
    if was ~= unit then
      credit = math.floor(credit / was * unit)
    end
    -- A clock that moved back refills nothing.
    if now > ts then
      credit = credit + (now - ts) * rate
      ts = now
    end
    credit = math.min(full, credit)
  end

  local shift = ts - now                -- > 0 only after a step back
  local need = cost * unit
  if credit < need then
    return false, math.floor(credit / unit), shift + (need - credit) / rate,
           shift + (full - credit) / rate, nil
  end

  credit = credit - need
  local state = nil
  if cost > 0 then
    if carry then
      state = rl_carry_state(full - credit, ts, unit, rate)
    else
      state = rl_state(credit, ts, unit)
    end
  end
  -- The receipt: the state's time and the tokens it then missed (credit
  -- units), so that a refund gives back no more than the refill since
  -- has not (refund below).
  return true, math.floor(credit / unit), 0, shift + (full - credit) / rate, state,
         ts, full - credit
end

-- Gives back what an admitted call took (refund.lua), its receipt r1, r2
-- the state's time and the tokens then missing: rl_refund_give's share
-- of its cost back into the bucket as the state holds it, at its own
-- time ts, never more than full.  A bucket that is full by now is a
-- fresh one: the key goes.  A state in another scale than the call's
-- (converted since, or not this key's) has nothing known to give back.
-- True when the state changed.
local function token_bucket_refund(key, limit, window, capacity, carry, cost,
                                   r1, r2, now)
  if cost <= 0 then
    return false
  end
  local g = rl_gcd(limit, window)
  local unit = window / g
  local rate = limit / g
  local full = capacity * unit
  if carry then
    -- The tokens missing at ts, in the state's own scale and rate.
    local debt, ts, was, wrate = rl_refund_read(key, 2, 4)
    if not debt or debt <= 0 or was ~= unit or wrate ~= rate then
      return false
    end
    local give = rl_refund_give(cost, unit, rate, r1, r2, ts)
    if give <= 0 then
      return false
    end
    debt = math.max(0, debt - give)
    if debt <= math.max(0, now - ts) * rate then
      return rl_refund_write(key, nil)
    end
    return rl_refund_write(key, rl_carry_state(debt, ts, unit, rate))
  end
  local credit, ts, was = rl_refund_read(key, 1, 3)
  if not credit or was ~= unit or credit >= full then
    return false
  end
  local give = rl_refund_give(cost, unit, rate, r1, r2, ts)
  if give <= 0 then
    return false
  end
  credit = math.min(full, credit + give)
  if credit + math.max(0, now - ts) * rate >= full then
    return rl_refund_write(key, nil)
  end
  return rl_refund_write(key, rl_state(credit, ts, unit))
end
