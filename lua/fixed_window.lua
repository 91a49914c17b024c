-- fixed_window.lua
--
-- Fixed window: at most `limit` units per window, windows aligned to
-- multiples of the window length on the Unix epoch.  Two windows meet at
-- an edge, so up to 2 x limit can pass within one window length: that is
-- the definition, and the demo shows it.
--
-- State: rl_state(w, n, 0), the window start (us) and the units used in
-- it (0.2.0: hash {w, n}).  State written under another window is read on
-- the current grid (w rounded down to a multiple of the window), with at
-- most `limit` units used.
--
-- A policy's state (carry): rl_carry_state(w, n, window, 0).  While the
-- window it counted ([w, w + its window)) still holds, its n units count
-- in the window of the current grid that holds now, and end with it; n
-- is kept as it is (a limit lowered below it and raised again finds it).

local function fixed_window(key, limit, window, cost, now, _, carry)
  local start = now - now % window
  local used = 0
  if carry then
    local w, n, was = rl_carry_read(key)
    if w then
      -- A clock that moved back stays in the newest window it has seen.
      local at = now
      if w > at then
        at = w
      end
      if at < w + was then
        start = at - at % window
        used = math.min(limit, n)
        if was ~= window then
          rl_write(key, rl_carry_state(start, n, window, 0),
                   start + window - now)
        end
      end
    end
  else
    local w, n = rl_read(key, 'w', 'n')
    if w then
      w = w - w % window
      -- A clock that moved back stays in the newest window it has seen.
      if w >= start then
        start = w
        used = math.min(limit, n)
      end
    end
  end

  local ends = start + window
  if used + cost > limit then
    return false, limit - used, ends - now, ends - now, nil
  end

  used = used + cost
  if cost == 0 then
    return true, limit - used, 0, used > 0 and ends - now or 0, nil
  end
  -- The receipt: the window charged.
  if carry then
    return true, limit - used, 0, ends - now,
           rl_carry_state(start, used, window, 0), start
  end
  return true, limit - used, 0, ends - now,
         rl_state(start, used, 0), start
end

-- Gives back cost units taken by an admitted call whose receipt is r1
-- (the window it was charged to), r2 (0) (refund.lua): only while the
-- state still counts that window; no more than it holds.  True when the
-- state changed.  A policy's state whose window was converted since
-- (fixed_window above: the count moved to another grid) has nothing
-- known to give back.
local function fixed_window_refund(key, limit, window, capacity, carry, cost,
                                   r1, r2, now)
  local w, n, was = rl_refund_read(key, carry and 2 or 1, carry and 4 or 3)
  if w ~= r1 or n <= 0 or cost <= 0 then
    return false
  end
  n = math.max(0, n - cost)
  if n == 0 then
    return rl_refund_write(key, nil)
  end
  if carry then
    return rl_refund_write(key, rl_carry_state(w, n, was, 0))
  end
  return rl_refund_write(key, rl_state(w, n, 0))
end
