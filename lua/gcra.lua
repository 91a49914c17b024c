-- gcra.lua
--
-- Generic cell rate algorithm: emission interval T = window / limit and
-- burst `burst` (the limit unless the caller set one), so the tolerance
-- is burst x T (the window when burst = limit).  One key holds the
-- theoretical arrival time (TAT); a call of cost c is admitted when
-- max(TAT, now) + c x T - now <= burst x T.
--
-- State: struct.pack('<Bdddd', 1, us, r, d, ts), the TAT as whole
-- microseconds us plus the exact fraction r/d, with
-- d = limit / gcd(limit, window), so T is never rounded; ts is the time
-- of the write (0.2.0 wrote the same numbers as text "<us>+<r>/<d>@<ts>",
-- which is read too).  By the definition TAT - ts never exceeds the
-- tolerance, so a state written under other parameters is cut to one
-- tolerance of the current ones as of ts, then drains from ts: no earlier
-- call can make a later one wait longer than its own tolerance plus its
-- own cost.  A clock that moved back (now < ts) only makes TAT - now
-- larger.  A 0.1.0 state has no "@<ts>"; it is read as written now, and
-- rewritten so if it held more than a tolerance.

-- The numbers of a GCRA state (nil, nil, nil, nil for a foreign value:
-- the arithmetic on them fails, as a WRONGTYPE would).
local function rl_gcra_read(st)
  if #st == 33 then
    local tag, us, r, d, ts = struct.unpack('<Bdddd', st)
    if tag == 1 then
      return us, r, d, ts, false
    end
  end
  local us, r, d, ts = string.match(st, '^(%d+)%+(%d+)/(%d+)@?(%d*)$')
  return tonumber(us), tonumber(r), tonumber(d), tonumber(ts), ts == ''
end

-- A policy's state (carry): rl_carry_state(debt, ts, unit, rate), the
-- units used at ts, (TAT - ts) / T, x unit, and the scale and rate they
-- were kept in: the units, not the time, are what carries.  Units the old
-- emission interval had drained by now are none; else they are kept in
-- the current scale (rounded up), at most one burst, and drain from ts
-- at the current interval.
local function rl_gcra_carried(key, now, unit, rate, full)
  local d, t, was, wrate = rl_carry_read(key)
  if not d or (now - t) * wrate >= d then
    return 0
  end
  local kept = math.min(full, rl_up(d, was, unit))
  if kept ~= d or was ~= unit or wrate ~= rate then
    rl_write(key, rl_carry_state(kept, t, unit, rate), t + kept / rate - now)
  end
  -- A clock that moved back (now < t) only makes the debt larger.
  local debt = kept - (now - t) * rate
  if debt < 0 then
    debt = 0
  end
  return debt
end

local function gcra(key, limit, window, cost, now, burst, carry)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- T, in 1/rate microseconds
  local rate = limit / g                -- fractions of a microsecond kept
  local capacity = burst                -- calls admitted at once
  local full = capacity * unit          -- burst x T x rate
  -- debt = (TAT - now) x rate, a whole number.
  local debt = 0
  local st = nil
  if carry then
    debt = rl_gcra_carried(key, now, unit, rate, full)
  else
    st = redis.call('GET', key)
  end
  if st then
    -- The binary state read here, the others by rl_gcra_read: a
    -- function call less on every check.
    local tag, us, r, d, ts, legacy
    if #st == 33 then
      tag, us, r, d, ts = struct.unpack('<Bdddd', st)
    end
    if tag ~= 1 then
      us, r, d, ts, legacy = rl_gcra_read(st)
    end
    if legacy then
      ts = now
    end
    -- The fraction r/d of a microsecond, in 1/rate: exact when the rate
    -- did not change, rounded up when it did.
    if d ~= rate then
      r = math.ceil(r * rate / d)
    end
    debt = (us - ts) * rate + r
    if debt > full then
      debt = full
      if legacy then
        local r = full % rate
        redis.call('SET', key, struct.pack('<Bdddd', 1, now + (full - r) / rate, r, rate, now),
                   'PX', math.max(1, rl_ms(full / rate)))
      end
    end
    debt = debt - (now - ts) * rate
    if debt < 0 then
      debt = 0
    end
  end

  local after = debt + cost * unit
  if after > full then
    return false, math.floor((full - debt) / unit), (after - full) / rate,
           debt / rate, nil
  end

  local state = nil
  if cost > 0 and carry then
    state = rl_carry_state(after, now, unit, rate)
  elseif cost > 0 then
    local r = after % rate
    state = struct.pack('<Bdddd', 1, now + (after - r) / rate, r, rate, now)
  end
  -- The receipt: the state's time and its debt (refund below).
  return true, math.floor((full - after) / unit), 0, after / rate, state,
         now, after
end

-- Gives back what an admitted call took (refund.lua), its receipt r1, r2
-- the state's time and debt: rl_refund_give's share of its cost off the
-- debt the state holds at its own time ts (the TAT moved back by it).  A
-- debt paid off by now is a fresh limiter: the key goes.  A state of
-- another rate than the call's has nothing known to give back.  True
-- when the state changed.
local function gcra_refund(key, limit, window, capacity, carry, cost, r1, r2,
                           now)
  if cost <= 0 then
    return false
  end
  local g = rl_gcd(limit, window)
  local unit = window / g
  local rate = limit / g
  if carry then
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
  local us, r, d, ts = rl_refund_read(key, 1, 4)
  -- A fraction of another rate is not this key's (the key names its
  -- parameters): nothing known to give back.
  if not us or d ~= rate then
    return false
  end
  -- (TAT - ts) x rate, as gcra above reads it.
  local debt = (us - ts) * rate + r
  if debt <= 0 then
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
  r = debt % rate
  return rl_refund_write(key, struct.pack('<Bdddd', 1, ts + (debt - r) / rate,
                                          r, rate, ts))
end
