-- sliding_counter.lua
--
-- Sliding window counter: the count of the current fixed window plus the
-- previous window's count weighted by the part of it that still lies
-- inside the sliding window.  An approximation of the sliding log that
-- needs two numbers per key instead of one member per unit.
--
-- State: rl_state(w, cur, prev), the current window start (us) and
-- the two counts (0.2.0: hash {w, cur, prev}).  The weighted sum is kept
-- multiplied by the window length so it stays whole.  State written under
-- other parameters is read on the current window grid (w rounded down to
-- a multiple of the window) with counts of at most `limit`, which is all
-- they can mean: no earlier call can make a later one wait longer than
-- one window plus its own cost's share of one.
--
-- A policy's state (carry): rl_carry_state(w, cur, prev, window).  Each
-- count that still counts under the window it was written with is put
-- at the latest moment its calls can have had (cur: now, or its window's
-- last microsecond; prev: the last microsecond before w) and lands in
-- the current or previous window of the current grid that holds that
-- moment, or in neither; the counts are kept as they are, and read with
-- at most `limit` each.

local function sliding_counter(key, limit, window, cost, now, _, carry)
  local at = now
  local start = now - now % window
  local cur, prev = 0, 0
  local kept = 0                        -- carry: prev as kept, uncapped
  if carry then
    local w, c, p, was = rl_carry_read(key)
    if w then
      -- A clock that moved back works from the start of the newest
      -- window seen.
      if w > at then
        at = w
      end
      start = at - at % window
      if at < w + was + was then
        local e = math.min(at, w + was - 1)
        if e >= start then
          cur = c
        elseif e >= start - window then
          kept = c
        end
      end
      if at < w + was then
        local e = w - 1
        if e >= start then
          cur = cur + p
        elseif e >= start - window then
          kept = kept + p
        end
      end
      if was ~= window and cur + kept > 0 then
        rl_write(key, rl_carry_state(start, cur, kept, window),
                 (cur > 0 and start + window + window or start + window) - now)
      end
      cur = math.min(limit, cur)
      prev = math.min(limit, kept)
    end
  end
  local w, c, p
  if not carry then
    w, c, p = rl_read(key, 'w', 'cur', 'prev')
  end
  if w then
    w = w - w % window
    if w >= start then
      -- Same window; a clock that moved back works from the start of the
      -- newest window seen, where the previous window weighs most.
      if w > start then
        at = w
      end
      start = w
      cur = math.min(limit, c)
      prev = math.min(limit, p)
    elseif w == start - window then
      prev = math.min(limit, c)
    end
  end

  local shift = at - now                -- > 0 only after a step back
  local left = window - (at - start)    -- us of the previous window still inside
  local used = prev * left + cur * window
  local remaining = limit - cur - math.ceil(prev * left / window)

  if used + cost * window > limit * window then
    local wait
    if cur + cost <= limit then
      -- The previous window's weight must shrink enough.
      wait = left - (limit - cur - cost) * window / prev
    else
      -- Wait for the next window, where this window becomes the
      -- previous one and must shrink in turn.
      wait = left + window - (limit - cost) * window / cur
    end
    local reset = left
    if cur > 0 then
      reset = left + window
    end
    return false, math.max(0, remaining), shift + wait, shift + reset, nil
  end

  local reset = 0
  if cur + cost > 0 then
    reset = shift + left + window
  elseif prev > 0 then
    reset = shift + left
  end
  local state = nil
  if cost > 0 then
    if carry then
      state = rl_carry_state(start, cur + cost, kept, window)
    else
      state = rl_state(start, cur + cost, prev)
    end
  end
  -- The receipt of a call that took something: the window charged (the
  -- one cur counts).
  return true, math.max(0, remaining - cost), 0, reset, state, state and start
end

-- Gives back cost units taken by an admitted call whose receipt is r1
-- (the window it was charged to), r2 (0) (refund.lua): from the current
-- count while that window is still the state's current one, from the
-- previous count once it has become the previous one (the state's window
-- starts one window length, its own for a policy's, after r1), never
-- below 0; after that the count no longer weighs.  True when the state
-- changed.
local function sliding_counter_refund(key, limit, window, capacity, carry,
                                      cost, r1, r2, now)
  local w, cur, prev, was = rl_refund_read(key, carry and 2 or 1,
                                           carry and 4 or 3)
  if not w or cost <= 0 then
    return false
  end
  if not carry then
    was = window
  end
  if w == r1 and cur > 0 then
    cur = math.max(0, cur - cost)
  elseif w == r1 + was and prev > 0 then
    prev = math.max(0, prev - cost)
  else
    return false
  end
  if cur == 0 and prev == 0 then
    return rl_refund_write(key, nil)
  end
  if carry then
    return rl_refund_write(key, rl_carry_state(w, cur, prev, was))
  end
  return rl_refund_write(key, rl_state(w, cur, prev))
end
