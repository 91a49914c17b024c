-- token_bucket.lua
--
-- Token bucket: capacity `burst` (the limit unless the caller set one),
-- refilled continuously at `limit` per window, starting full.  A call takes `cost` tokens if the bucket holds
-- them.
--
-- State: hash {credit = tokens x unit, ts = time of that credit,
-- unit = the scale (window / gcd(limit, window)) the credit is kept in}.

local function token_bucket(key, limit, window, cost, now, burst)
  local g = rl_gcd(limit, window)
  local unit = window / g               -- one token, in credit
  local rate = limit / g                -- credit gained per microsecond
  local full = burst * unit
  local credit, ts = full, now
  local st = redis.call('HMGET', key, 'credit', 'ts', 'unit')
  if st[1] then
    credit = tonumber(st[1])
    ts = tonumber(st[2])
    -- Kept in another scale when the limit or window changed: convert,
    -- rounding down.
    local was = tonumber(st[3])
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
  local reset = shift + (full - credit) / rate
  local apply = nil
  if cost > 0 then
    apply = function()
      redis.call('HSET', key, 'credit', rl_num(credit), 'ts', rl_num(ts),
                 'unit', rl_num(unit))
      rl_expire(key, reset)
    end
  end
  return true, math.floor(credit / unit), 0, reset, apply
end
