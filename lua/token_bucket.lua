-- token_bucket.lua
--
-- Token bucket: capacity `limit`, refilled continuously at `limit` per
-- window, starting full.  A call takes `cost` tokens if the bucket holds
-- them.
--
-- State: hash {credit = tokens x window (us), ts = time of that credit,
-- window = the window (us) the credit is scaled by}.

local function token_bucket(key, limit, window, cost, now)
  local full = limit * window
  local credit, ts = full, now
  local st = redis.call('HMGET', key, 'credit', 'ts', 'window')
  if st[1] then
    credit = tonumber(st[1])
    ts = tonumber(st[2])
    -- Scaled by the window it was stored with; rescale if that changed.
    local was = tonumber(st[3])
    if was and was ~= window then
      credit = credit / was * window
    end
    -- A clock that moved back refills nothing.
    if now > ts then
      credit = credit + (now - ts) * limit
      ts = now
    end
    credit = math.min(full, credit)
  end

  local need = cost * window
  if credit < need then
    return false, math.floor(credit / window), (need - credit) / limit,
           (full - credit) / limit, nil
  end

  credit = credit - need
  local reset = (full - credit) / limit
  local function apply()
    redis.call('HSET', key, 'credit', rl_num(credit), 'ts', rl_num(ts),
               'window', rl_num(window))
    rl_expire(key, reset)
  end
  return true, math.floor(credit / window), 0, reset, apply
end
