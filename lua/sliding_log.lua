-- sliding_log.lua
--
-- Sliding window log: a sorted set holding one member per unit admitted,
-- scored by its time in microseconds.  A call is admitted only if the
-- units in (now - window, now] plus its cost stay within `limit`, so no
-- interval of length `window` ever holds more than `limit` units.
--
-- Members are "<us>-<seq>".  Calls in the same microsecond (or after the
-- clock moved back, which stamps them with the newest time seen) get the
-- next sequence numbers at that time: the members at one time are always
-- numbered 0..n-1, and old entries leave by score, all of a time at once,
-- so n (a ZCOUNT) is the next number.

local function sliding_log(key, limit, window, cost, now)
  local stamp = now
  local seq = 0
  local newest = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')
  if newest[1] then
    local t = tonumber(newest[2])
    if t >= now then
      stamp = t
      seq = redis.call('ZCOUNT', key, newest[2], newest[2])
    end
  end

  -- Counted from the caller's clock: after a step back that counts more.
  local floor = now - window
  local used = redis.call('ZCOUNT', key, '(' .. rl_num(floor), '+inf')
  local reset = 0
  if used > 0 then
    reset = tonumber(newest[2]) + window - now
  end

  if used + cost > limit then
    -- Wait until enough of the oldest units have left the window.
    local k = used + cost - limit
    local nth = redis.call('ZRANGEBYSCORE', key, '(' .. rl_num(floor), '+inf',
                           'WITHSCORES', 'LIMIT', k - 1, 1)
    return false, limit - used, tonumber(nth[2]) + window - now, reset, nil
  end

  if cost == 0 then
    return true, limit - used, 0, reset, nil
  end

  reset = stamp + window - now
  local function apply()
    redis.call('ZREMRANGEBYSCORE', key, '-inf', rl_num(floor))
    local at = rl_num(stamp)
    local args = {}
    for i = 0, cost - 1 do
      args[#args + 1] = at
      args[#args + 1] = at .. '-' .. (seq + i)
      if #args >= 1000 then
        redis.call('ZADD', key, unpack(args))
        args = {}
      end
    end
    if #args > 0 then
      redis.call('ZADD', key, unpack(args))
    end
    rl_expire(key, reset)
  end
  return true, limit - used - cost, 0, reset, apply
end
