-- sliding_log.lua
--
-- Sliding window log: a call is admitted only if the units in
-- (now - window, now] plus its cost stay within `limit`, so no interval
-- of length `window` ever holds more than `limit` units.
--
-- State: a sorted set with one member per admitted call, scored by its
-- time in microseconds.  The member is struct.pack('>dd', cum, cost):
-- cum is the count of units admitted so far, this call's included, as a
-- big-endian double, which sorts bytewise as the number does, so that
-- calls stamped with the same time sort in the order they came; 16 bytes,
-- read by one struct.unpack (0.2.0 wrote the text "<cum>:<cost>", cum
-- zero-padded to 16 digits, which is read too).  The units in the window are then the newest cum minus the cum
-- before the first call in the window, whatever the costs: every call
-- does a few O(log n) sorted-set steps, and a denial that must find which
-- unit leaves when searches the ranks in O(log^2 n).
--
-- A call is stamped with the newest time the log has seen if the clock
-- moved back, so the times never decrease and rank order is call order.
-- cum is kept below 2^53: past RL_LOG_WRAP it starts again from the
-- remainder, at a call stamped later than every member (so that no two
-- members of one time straddle the wrap), and differences are taken
-- modulo RL_LOG_WRAP.  Expired members go 64 at most per call, or all at
-- once (UNLINK, freed in the background) when the window is empty.
--
-- A log written by 0.1.0 (one member "<us>-<seq>" per unit) is read as
-- its count of units in the window, all leaving with the newest of them,
-- and is replaced by one member saying so at the next admitted call: it
-- never admits more than the old log would have.

local RL_LOG_WRAP = 1000000000000000
local RL_LOG_PRUNE = 64

-- cum and cost of a member; nil for a 0.1.0 member.
local function rl_log_member(m)
  if #m == 16 then
    return struct.unpack('>dd', m)
  end
  if string.byte(m, 17) ~= 58 then      -- ':', a 0.2.0 member
    return nil
  end
  return tonumber(string.sub(m, 1, 16)), tonumber(string.sub(m, 18))
end

local function rl_log_text(cum, cost)
  return struct.pack('>dd', cum, cost)
end

-- Scores go to Redis as numbers (it writes them out exactly, in C).

local function sliding_log(key, limit, window, cost, now)
  local floor = now - window
  local stamp, newest_t, cum = now, nil, 0
  local used, base, first_cost, first_t = 0, 0, 0, nil
  local legacy = false
  local expired = nil                   -- members at or before floor
  -- Constant ranks go as text: a Lua number argument is written out by
  -- Redis with printf("%.17g"), about 0.4 us each (1.7 us a check here).
  local newest = redis.call('ZRANGE', key, '-1', '-1', 'WITHSCORES')
  if newest[1] then
    newest_t = tonumber(newest[2])
    if newest_t > now then
      stamp = newest_t
    end
    cum = rl_log_member(newest[1])
    if newest_t > floor then
      -- The first member in the window.  Most calls find it among the
      -- two oldest (each call prunes what expired, so at most one more
      -- has expired since): one command, where counting the expired
      -- (ZCOUNT) and reading that rank (cheaper than by score) is two.
      local first = redis.call('ZRANGE', key, '0', '1', 'WITHSCORES')
      local fm, ft = first[1], first[2]
      expired = 0
      if tonumber(ft) <= floor then
        expired, fm, ft = 1, first[3], first[4]
        if tonumber(ft) <= floor then
          expired = redis.call('ZCOUNT', key, '-inf', floor)
          first = redis.call('ZRANGE', key, expired, expired, 'WITHSCORES')
          fm, ft = first[1], first[2]
        end
      end
      first_t = tonumber(ft)
      local fcum, fcost = rl_log_member(fm)
      if cum and fcum then
        base = fcum - fcost
        first_cost = fcost
        used = (cum - base) % RL_LOG_WRAP
      else
        legacy = true
        used = redis.call('ZCOUNT', key, '(' .. string.format('%d', floor), '+inf')
      end
    elseif not cum then
      legacy = true
    end
  end

  -- Counted from the caller's clock: after a step back that counts more.
  local reset = 0
  if used > 0 then
    reset = newest_t + window - now
  end

  if used + cost > limit then
    -- Wait until unit number base + k, k = used + cost - limit, has left.
    local k = used + cost - limit
    local wait_t = newest_t
    if legacy then
      -- Every unit leaves with the newest.
    elseif k <= first_cost then
      wait_t = first_t
    else
      -- Ranks lo < hi: the member at lo ends before unit base + k, the
      -- member at hi holds it or ends after it.
      local lo = expired
      local hi = redis.call('ZCARD', key) - 1
      while hi - lo > 1 do
        local mid = math.floor((lo + hi) / 2)
        local m = redis.call('ZRANGE', key, mid, mid, 'WITHSCORES')
        local c = rl_log_member(m[1])
        -- A 0.1.0 member (written by a server not yet upgraded) has no
        -- count: the search stops there, which only shortens the wait
        -- reported; what is admitted is decided by the count alone.
        if c == nil or (c - base) % RL_LOG_WRAP >= k then
          hi = mid
          wait_t = tonumber(m[2])
        else
          lo = mid
        end
      end
    end
    return false, limit - used, wait_t + window - now, reset, nil
  end

  if cost == 0 then
    return true, limit - used, 0, reset, nil
  end

  reset = stamp + window - now
  local function apply()
    if legacy or used == 0 then
      -- Nothing in the window is needed any more (or it is a 0.1.0 log):
      -- start afresh, the old members freed off the main thread.
      if newest_t then
        redis.call('UNLINK', key)
      end
      cum = 0
      if used > 0 then
        cum = used
        redis.call('ZADD', key, newest_t, rl_log_text(cum, cum))
      end
    elseif expired > 0 then
      redis.call('ZREMRANGEBYRANK', key, '0', math.min(expired, RL_LOG_PRUNE) - 1)
    end
    cum = cum + cost
    if cum >= RL_LOG_WRAP and (newest_t == nil or stamp > newest_t) then
      cum = cum - RL_LOG_WRAP
    end
    redis.call('ZADD', key, stamp, rl_log_text(cum, cost))
    redis.call('PEXPIRE', key, math.max(1, rl_ms(reset)))
  end
  return true, limit - used - cost, 0, reset, apply
end
