-- fixed_window.lua
--
-- Fixed window: at most `limit` units per window, windows aligned to
-- multiples of the window length on the Unix epoch.  Two windows meet at
-- an edge, so up to 2 x limit can pass within one window length: that is
-- the definition, and the demo shows it.
--
-- State: hash {w = window start (us), n = units used in it}.  State
-- written under another window is read on the current grid (w rounded
-- down to a multiple of the window), with at most `limit` units used.

local function fixed_window(key, limit, window, cost, now)
  local start = now - now % window
  local used = 0
  local st = redis.call('HMGET', key, 'w', 'n')
  if st[1] then
    local w = tonumber(st[1])
    w = w - w % window
    -- A clock that moved back stays in the newest window it has seen.
    if w >= start then
      start = w
      used = math.min(limit, tonumber(st[2]))
    end
  end

  local ends = start + window
  if used + cost > limit then
    return false, limit - used, ends - now, ends - now, nil
  end

  used = used + cost
  local reset = 0
  if used > 0 then
    reset = ends - now
  end
  local apply = nil
  if cost > 0 then
    apply = function()
      redis.call('HSET', key, 'w', rl_num(start), 'n', rl_num(used))
      rl_expire(key, reset)
    end
  end
  return true, limit - used, 0, reset, apply
end
