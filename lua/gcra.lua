-- gcra.lua
--
-- Generic cell rate algorithm: emission interval T = window / limit and
-- burst `limit`.  One key holds the theoretical arrival time (TAT); a
-- call of cost c is admitted when max(TAT, now) + c x T - now <= window.
--
-- State: string "<us>+<r>/<limit>", the TAT as whole microseconds plus
-- an exact fraction, so T never has to be rounded.

local function gcra(key, limit, window, cost, now)
  -- debt = (TAT - now) x limit, in microseconds x units; whole numbers.
  local debt = 0
  local st = redis.call('GET', key)
  if st then
    local us, r, d = string.match(st, '^(%d+)%+(%d+)/(%d+)$')
    debt = (tonumber(us) - now) * limit + tonumber(r) * limit / tonumber(d)
    if debt < 0 then
      debt = 0
    end
  end

  local full = limit * window
  local after = debt + cost * window
  if after > full then
    return false, math.floor((full - debt) / window), (after - full) / limit,
           debt / limit, nil
  end

  local function apply()
    local r = after % limit
    local us = now + (after - r) / limit
    redis.call('SET', key, rl_num(us) .. '+' .. rl_num(r) .. '/' .. rl_num(limit))
    rl_expire(key, after / limit)
  end
  return true, math.floor((full - after) / window), 0, after / limit, apply
end
