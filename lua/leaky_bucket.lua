-- leaky_bucket.lua
--
-- Leaky bucket used as a policer: each call pours `cost` units into a
-- bucket of size `limit` that drains continuously at `limit` per window
-- and starts empty; a call that would overflow the bucket is refused.
--
-- State: hash {level = units x window (us), ts = time of that level,
-- window = the window (us) the level is scaled by}.

local function leaky_bucket(key, limit, window, cost, now)
  local full = limit * window
  local level, ts = 0, now
  local st = redis.call('HMGET', key, 'level', 'ts', 'window')
  if st[1] then
    level = tonumber(st[1])
    ts = tonumber(st[2])
    -- Scaled by the window it was stored with; rescale if that changed.
    local was = tonumber(st[3])
    if was and was ~= window then
      level = level / was * window
    end
    -- A clock that moved back drains nothing.
    if now > ts then
      level = math.max(0, level - (now - ts) * limit)
      ts = now
    end
  end

  local pour = cost * window
  if level + pour > full then
    return false, math.floor((full - level) / window),
           (level + pour - full) / limit, level / limit, nil
  end

  level = level + pour
  local function apply()
    redis.call('HSET', key, 'level', rl_num(level), 'ts', rl_num(ts),
               'window', rl_num(window))
    rl_expire(key, level / limit)
  end
  return true, math.floor((full - level) / window), 0, level / limit, apply
end
