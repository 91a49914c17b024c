-- gcra.lua
--
-- Generic cell rate algorithm: emission interval T = window / limit and
-- burst `limit`.  One key holds the theoretical arrival time (TAT); a
-- call of cost c is admitted when max(TAT, now) + c x T - now <= window.
--
-- State: string "<us>+<r>/<d>", the TAT as whole microseconds plus the
-- exact fraction r/d, with d = limit / gcd(limit, window), so T is never
-- rounded.  A clock that moved back only makes TAT - now larger.

local function gcra(key, limit, window, cost, now)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- T, in 1/rate microseconds
  local rate = limit / g                -- fractions of a microsecond kept
  -- debt = (TAT - now) x rate, a whole number.
  local debt = 0
  local st = redis.call('GET', key)
  if st then
    local us, r, d = string.match(st, '^(%d+)%+(%d+)/(%d+)$')
    debt = (tonumber(us) - now) * rate + math.ceil(tonumber(r) * rate / tonumber(d))
    if debt < 0 then
      debt = 0
    end
  end

  local full = limit * unit             -- window x rate
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
      redis.call('SET', key, rl_num(us) .. '+' .. rl_num(r) .. '/' .. rl_num(rate),
                 'PX', math.max(1, rl_ms(after / rate)))
    end
  end
  return true, math.floor((full - after) / unit), 0, after / rate, apply
end
