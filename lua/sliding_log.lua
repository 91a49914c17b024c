-- sliding_log.lua
--
-- Sliding window log: a sorted set holding one member per unit admitted,
-- scored by its time in microseconds.  A call is admitted only if the
-- units in (now - window, now] plus its cost stay within `limit`, so no
-- interval of length `window` ever holds more than `limit` units.
--
-- Members are "<us>-<seq>": calls in the same microsecond get distinct
-- sequence numbers, so each one is counted.

local function sliding_log(key, limit, window, cost, now)
  local seq = 0
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[1] then
    local t = tonumber(newest[2])
    -- Same microsecond, or a clock that moved back: continue after the
    -- newest member, never before it.
    if t >= now then
      now = t
      seq = tonumber(string.match(newest[1], '-(%d+)$')) + 1
    end
  end

  local floor = now - window
  local used = redis.call('ZCOUNT', key, '(' .. rl_num(floor), '+inf')

  if used + cost > limit then
    -- Wait until enough of the oldest units have left the window.
    local k = used + cost - limit
    local nth = redis.call('ZRANGEBYSCORE', key, '(' .. rl_num(floor), '+inf',
                           'WITHSCORES', 'LIMIT', k - 1, 1)
    local leaves = tonumber(nth[2]) + window
    local reset = tonumber(newest[2]) + window - now
    return false, limit - used, leaves - now, reset, nil
  end

  if cost == 0 then
    local reset = 0
    if used > 0 then
      reset = tonumber(newest[2]) + window - now
    end
    return true, limit - used, 0, reset, nil
  end

  local function apply()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', rl_num(floor))
    local stamp = rl_num(now)
    local args = {}
    for i = 0, cost - 1 do
      args[#args + 1] = stamp
      args[#args + 1] = stamp .. '-' .. (seq + i)
      if #args >= 1000 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', key, unpack(args))
    end
    rl_expire(key, window)
  end
  return true, limit - used - cost, 0, window, apply
end
