-- sliding_log.lua
--
-- Sliding window log: a call is admitted only if the units in
-- (now - window, now] plus its cost stay within `limit`, so no interval
-- of length `window` ever holds more than `limit` units.
--
-- State: a sorted set with one member per admitted call, scored by its
-- time in microseconds.  The member is struct.pack('>dddd', cum, cost, t,
-- live), 32 bytes: cum is the count of units admitted so far, this call's
-- included, as a big-endian double, which sorts bytewise as the number
-- does, so that calls stamped with the same time sort in the order they
-- came; cost is the call's units; t is its time, the score again, so that
-- the log is read without its scores (a score read costs Redis a %.17g
-- and the script a tonumber, about 1.2 us); live is the time until which
-- the key's TTL is known to keep it.  The units in the window are then the
-- newest cum minus the cum before the first call in the window, whatever
-- the costs: every call does a few O(log n) sorted-set steps, and a
-- denial that must find which unit leaves when searches the ranks in
-- O(log^2 n).
--
-- The TTL: a sorted set cannot be written with its TTL in one command,
-- so PEXPIRE is sent only when the key would otherwise end before this
-- call's member leaves the window, and then for half a window more than
-- that: a busy limiter renews its TTL about once per quarter window (a
-- quarter is kept as a margin, see apply) instead of on every call (one
-- redis.call, about 2 us, saved), and a log nobody calls is gone at most
-- one and a half windows after its last call.
--
-- A call is stamped with the newest time the log has seen if the clock
-- moved back, so the times never decrease and rank order is call order.
-- cum is kept below 2^53: past RL_LOG_WRAP it starts again from the
-- remainder, at a call stamped later than every member (so that no two
-- members of one time straddle the wrap), and differences are taken
-- modulo RL_LOG_WRAP.  Expired members go 64 at most per call, or all at
-- once (UNLINK, freed in the background) when the window is empty.
--
-- Older members are read with their scores, as their time: 0.2.0 wrote
-- the text "<cum>:<cost>", cum zero-padded to 16 digits, which means the
-- same; a log written by 0.1.0 (one member "<us>-<seq>" per unit) is read
-- as its count of units in the window, all leaving with the newest of
-- them, and is replaced by one member saying so at the next admitted
-- call: it never admits more than the old log would have.

-- A policy's log (carry) is the same log: it has no parameters, and is
-- counted under the current ones at once.  A window raised since the
-- last admitted call may need the key to live longer than that call's
-- TTL: a call renews it then, whatever it decides (its members' live is
-- left as it is, so each call renews it until the next admitted one).

local RL_LOG_WRAP = 1000000000000000
local RL_LOG_PRUNE = 64

-- cum and cost of a 0.2.0 member; nil for a 0.1.0 one.
local function rl_log_old(m)
  if string.byte(m, 17) ~= 58 then      -- ':', a 0.2.0 member
    return nil
  end
  return tonumber(string.sub(m, 1, 16)), tonumber(string.sub(m, 18))
end

-- cum, cost and time of a member read with its score; the time the key
-- lives until is not known from an older member (0).
local function rl_log_scored(m, score)
  if #m == 32 then
    return struct.unpack('>dddd', m)
  end
  local cum, cost = rl_log_old(m)
  return cum, cost, tonumber(score), 0
end

-- The members of ranks i to j of a log (text or numbers; at most two),
-- each as cum, cost, time and the time its key lives until: nil past the
-- end, cum and cost nil for a 0.1.0 member.  Members of 0.3.0's form hold
-- their time, so the log is read without scores; only a log still
-- holding older members is read again with them.
local function rl_log_at(key, i, j)
  local m = redis.call('ZRANGE', key, i, j)
  local a, b = m[1], m[2]
  if a == nil then
    return nil
  end
  if #a == 32 and (b == nil or #b == 32) then
    local c1, k1, t1, l1 = struct.unpack('>dddd', a)
    if b == nil then
      return c1, k1, t1, l1
    end
    local c2, k2, t2, l2 = struct.unpack('>dddd', b)
    return c1, k1, t1, l1, c2, k2, t2, l2
  end
  m = redis.call('ZRANGE', key, i, j, 'WITHSCORES')
  local c1, k1, t1, l1 = rl_log_scored(m[1], m[2])
  if m[3] == nil then
    return c1, k1, t1, l1
  end
  local c2, k2, t2, l2 = rl_log_scored(m[3], m[4])
  return c1, k1, t1, l1, c2, k2, t2, l2
end

local function rl_log_text(cum, cost, t, live)
  return struct.pack('>dddd', cum, cost, t, live)
end

-- Scores and ranks go to Redis as numbers (it writes them out exactly,
-- in C); constant ranks as text (a number argument is written out with
-- printf("%.17g"), about 0.4 us each).

local function sliding_log(key, limit, window, cost, now, _, carry)
  local floor = now - window
  local stamp, newest_t, cum = now, nil, 0
  local used, base, first_cost, first_t = 0, 0, 0, nil
  local legacy = false
  local expired = nil                   -- members at or before floor
  local live = 0                        -- the key lives until then
  local ncum, _, nt, nlive = rl_log_at(key, '-1', '-1')
  if nt then
    newest_t, cum, live = nt, ncum, nlive
    if newest_t > now then
      stamp = newest_t
    end
    if newest_t > floor then
      -- The first member in the window.  Most calls find it among the
      -- two oldest (each call prunes what expired, so at most one more
      -- has expired since): one command, where counting the expired
      -- (ZCOUNT) and reading that rank is two.
      local fcum, fcost, ft, _, c2, k2, t2 = rl_log_at(key, '0', '1')
      expired = 0
      if ft <= floor then
        expired, fcum, fcost, ft = 1, c2, k2, t2
        if ft <= floor then
          expired = redis.call('ZCOUNT', key, '-inf', floor)
          fcum, fcost, ft = rl_log_at(key, expired, expired)
        end
      end
      first_t = ft
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
    if carry and live < newest_t + window then
      redis.call('PEXPIRE', key, math.max(1, rl_ms(reset + window / 2)))
    end
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
        local c, _, t = rl_log_at(key, mid, mid)
        -- A 0.1.0 member (written by a server not yet upgraded) has no
        -- count: the search stops there, which only shortens the wait
        -- reported; what is admitted is decided by the count alone.
        if c == nil or (c - base) % RL_LOG_WRAP >= k then
          hi = mid
          wait_t = t
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
  -- Nothing in the window is needed any more (or it is a 0.1.0 log): the
  -- log starts afresh, from the units still in the window.
  local afresh = legacy or used == 0
  -- The cum of this call's member, known now: it is the receipt.
  local mcum = (afresh and used or cum) + cost
  if mcum >= RL_LOG_WRAP and (newest_t == nil or stamp > newest_t) then
    mcum = mcum - RL_LOG_WRAP
  end
  local function apply()
    local renew = live < stamp + window
    if afresh then
      -- The old members freed off the main thread.
      if newest_t then
        redis.call('UNLINK', key)
      end
      renew = true
      if used > 0 then
        redis.call('ZADD', key, newest_t, rl_log_text(used, used, newest_t, 0))
      end
    elseif expired > 0 then
      redis.call('ZREMRANGEBYRANK', key, '0', math.min(expired, RL_LOG_PRUNE) - 1)
    end
    local ttl = 0
    if renew then
      -- Redis counts the TTL in whole ms from its own clock, which may
      -- be read when the script starts (Redis 7.2 and later), before
      -- TIME: live is taken a quarter window (at least 2 ms) short of it,
      -- so that the key is sure to last until then.
      ttl = math.max(1, rl_ms(reset + window / 2))
      live = now + ttl * 1000 - math.max(2000, window / 4)
    end
    redis.call('ZADD', key, stamp, rl_log_text(mcum, cost, stamp, live))
    if renew then
      redis.call('PEXPIRE', key, ttl)
    end
  end
  -- The receipt: the member written, by its time and cum.
  return true, limit - used - cost, 0, reset, apply, stamp, mcum
end

-- Sends cmd key args[1..n], RL_LOG_REWRITE arguments (an even number:
-- ZADD's pairs stay whole) at most per command, as a Lua unpack of many
-- more would pass the C stack's limit.
local RL_LOG_REWRITE = 512
local function rl_log_send(cmd, key, args, n)
  for i = 1, n, RL_LOG_REWRITE do
    redis.call(cmd, key, unpack(args, i, math.min(n, i + RL_LOG_REWRITE - 1)))
  end
end

-- Most members after the first one refunded that a refund rewrites: a
-- refund lowers the cum of every later member, so its work grows with
-- the calls admitted on the key since.  Past this many, the refunds of
-- that call give nothing back (the charge stays until it leaves the
-- window), so that no refund holds Redis for long.
local RL_LOG_REWRITE_MAX = 1024

-- Gives back the calls items[1..n] ({r1, r2, cost} each: the time and
-- cum of the member written, its cost; refund.lua) took from one log, in
-- one pass: each call's member goes (a member of that time and cost,
-- the one of cum r2 if it is there: two of one time and cost count the
-- same in every window, so either may go), and every later member is
-- rewritten once with its cum lowered by the costs removed before it, so
-- that every window that held a removed call holds its cost less and the
-- others are unchanged.  True when the log changed.  Nothing is given
-- back (false) for a member not found (gone with its window), an older
-- form of log, a rewrite past RL_LOG_REWRITE_MAX members, or a cum that
-- wrapped since (RL_LOG_WRAP).
local function sliding_log_refund_many(key, items, n)
  local gone, first = {}, nil
  for j = 1, n do
    local r1, r2, cost = items[j][1], items[j][2], items[j][3]
    if cost > 0 then
      local m = redis.pcall('ZRANGEBYSCORE', key, r1, r1)
      if m.err then
        if not string.find(m.err, 'WRONGTYPE', 1, true) then
          redis.call('ZRANGEBYSCORE', key, r1, r1)
        end
        return false
      end
      local pick = nil
      for i = 1, #m do
        if #m[i] == 32 and not gone[m[i]] then
          local c, k = struct.unpack('>dddd', m[i])
          if k == cost and (c == r2 or not pick) then
            pick = m[i]
            if c == r2 then
              break
            end
          end
        end
      end
      if pick then
        gone[pick] = cost
        local rank = redis.call('ZRANK', key, pick)
        if first == nil or rank < first then
          first = rank
        end
      end
    end
  end
  if first == nil then
    return false
  end
  if redis.call('ZCARD', key) - first > RL_LOG_REWRITE_MAX + 1 then
    return false
  end
  local later = redis.call('ZRANGE', key, first, '-1')
  local old = {}
  for i = 1, #later do
    if #later[i] ~= 32 then
      return false
    end
    old[later[i]] = true
  end
  -- The new members come before the old ones go, so that the log is
  -- never empty on the way (Redis would delete the key, and the ZADD
  -- after would make a key without a TTL).  A new member may be an old
  -- one's bytes (two of one time and cost, one cum apart): that one is
  -- neither added nor removed.  None is the bytes of a member before the
  -- first one refunded (a lower cum, or, past a wrap, an earlier time).
  local adds, keep, na, sub = {}, {}, 0, 0
  for i = 1, #later do
    local cost = gone[later[i]]
    if cost then
      sub = sub + cost
    else
      local c, k, t, l = struct.unpack('>dddd', later[i])
      if c < sub then
        return false
      end
      if sub > 0 then
        local b = rl_log_text(c - sub, k, t, l)
        if old[b] then
          keep[b] = true
        else
          adds[na + 1], adds[na + 2] = t, b
          na = na + 2
        end
      else
        keep[later[i]] = true
      end
    end
  end
  rl_log_send('ZADD', key, adds, na)
  local dels, nd = {}, 0
  for i = 1, #later do
    if not keep[later[i]] then
      nd = nd + 1
      dels[nd] = later[i]
    end
  end
  rl_log_send('ZREM', key, dels, nd)
  return true
end
