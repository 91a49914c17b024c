-- gcra.lua
--
-- Generic cell rate algorithm: emission interval T = window / limit and
-- burst `burst` (the limit unless the caller set one), so the tolerance
-- is burst x T (the window when burst = limit).  One key holds the
-- theoretical arrival time (TAT); a call of cost c is admitted when
-- max(TAT, now) + c x T - now <= burst x T.
--
-- State: string "<us>+<r>/<d>@<ts>", the TAT as whole microseconds plus
-- the exact fraction r/d, with d = limit / gcd(limit, window), so T is
-- never rounded; ts is the time of the write.  By the definition TAT - ts
-- never exceeds the tolerance, so a state written under other parameters
-- is cut to one tolerance of the current ones as of ts, then drains from
-- ts: no earlier call can make a later one wait longer than its own
-- tolerance plus its own cost.  A clock that moved back (now < ts) only
-- makes TAT - now larger.  A 0.1.0 state has no "@<ts>"; it is read as
-- written now, and rewritten so if it held more than a tolerance.

local function gcra(key, limit, window, cost, now, burst)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- T, in 1/rate microseconds
  local rate = limit / g                -- fractions of a microsecond kept
  local full = burst * unit             -- burst x T x rate
  -- debt = (TAT - now) x rate, a whole number.
  local debt = 0
  local st = redis.call('GET', key)
  if st then
    local us, r, d, ts = string.match(st, '^(%d+)%+(%d+)/(%d+)@?(%d*)$')
    us, r, d = tonumber(us), tonumber(r), tonumber(d)
    local legacy = ts == ''
    ts = legacy and now or tonumber(ts)
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
        redis.call('SET', key, rl_num(now + (full - r) / rate) .. '+' .. rl_num(r)
                   .. '/' .. rl_num(rate) .. '@' .. rl_num(now),
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

  local apply = nil
  if cost > 0 then
    apply = function()
      local r = after % rate
      local us = now + (after - r) / rate
      -- One command for the state and its TTL.
      redis.call('SET', key, rl_num(us) .. '+' .. rl_num(r) .. '/' .. rl_num(rate)
                 .. '@' .. rl_num(now), 'PX', math.max(1, rl_ms(after / rate)))
    end
  end
  return true, math.floor((full - after) / unit), 0, after / rate, apply
end
