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
  return true, math.floor(credit / unit), 0, shift + (full - credit) / rate, state
end

-- Gives back cost units taken by an admitted call whose receipt is r1,
-- r2 (refund.lua).  True when the state changed.
local function token_bucket_refund(key, limit, window, capacity, carry, cost, r1, r2,
                           now)
  return false
end
