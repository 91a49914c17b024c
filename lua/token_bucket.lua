-- token_bucket.lua
--
-- Token bucket: capacity `burst` (the limit unless the caller set one),
-- refilled continuously at `limit` per window, starting full.  A call takes `cost` tokens if the bucket holds
-- them.
--
-- State: rl_state(credit, ts, unit), credit = tokens x unit at time
-- ts, unit = the scale (window / gcd(limit, window)) the credit is kept
-- in (0.2.0: hash {credit, ts, unit}).

local function token_bucket(key, limit, window, cost, now, burst)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- one token, in credit
  local rate = limit / g                -- credit gained per microsecond
  local capacity = burst                -- tokens the bucket holds
  local full = capacity * unit
  local credit, ts = full, now
  local c, t, was = rl_read(key, 'credit', 'ts', 'unit')
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
    state = rl_state(credit, ts, unit)
  end
  return true, math.floor(credit / unit), 0, shift + (full - credit) / rate, state
end
