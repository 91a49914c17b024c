-- common.lua
--
-- Helpers shared by every ratelimit script.  The build joins this file,
-- the algorithm files and a main part (allow.lua or layered.lua) into one
-- script per entry point, so each script is self-contained in Redis.
--
-- Units: times and windows are integer microseconds.  State that grows
-- continuously (buckets, GCRA) is kept scaled so that one unit is
-- window / g and the rate is limit / g per microsecond, where
-- g = gcd(limit, window): every quantity is then a whole number, and the
-- extension admits only parameters for which limit x window / g stays
-- below 2^53, where a Lua double is exact.
--
-- A clock that moved back is never trusted to grant anything: each
-- algorithm works at the newest time its state has seen and reports its
-- waits from the caller's own clock.  A call of cost 0 writes nothing.
--
-- Since 0.4.0 a key names its limit, window and burst (rl_redis_key), so a
-- state is read only under the parameters it was written with.  What the
-- algorithms do with a state written under other parameters (cut it to
-- what the caller's parameters can mean) is a defence against a state
-- changed by hand, not a path the parameter forms take.  A named policy's
-- limiter (0.5.0) is the path that does: see "carry" below.
--
-- What a check costs Redis (test/bench/redis_time.sh measures it) is
-- mostly its redis.call()s, then the Lua work around them, where string
-- work is dear (a string.match with its tonumbers about 2 us, a
-- string.format about 1 us, on the bench machine).  The savings, each
-- named where it is made:
--   one command for state and TTL: every algorithm but the sliding log
--     keeps one string, written with SET ... PX (no HSET + PEXPIRE);
--   a state cheap to parse: that string is binary, struct.pack('<Bddd'):
--     a tag byte 1, then three doubles (whole numbers below 2^53, exact),
--     read by one struct.unpack (0.2 us) instead of text to be parsed;
--   nothing made per call that need not be: no closure for the write (an
--     algorithm returns its new state as a string), no tables beyond the
--     reply; under Redis Functions (rl_scripts.c) not even the functions
--     themselves, which a script defines anew on every run.

-- The globals every check uses, as locals: a local is read directly, a
-- global is looked up by name on every use (under Redis Functions through
-- the library's environment, dearer still: about 0.5 us a check).  A
-- library is loaded where they are not yet there, so each main part
-- binds them at its first line: on every run of a script, once for a
-- library's functions.
local math, string, redis, tonumber, type, struct
local function rl_globals()
  local g = _G
  math, string, redis, tonumber, type, struct =
    g.math, g.string, g.redis, g.tonumber, g.type, g.struct
end

-- The clock: Redis TIME, unless the caller pinned one (tests only).
local function rl_clock(pinned)
  if pinned ~= '0' then                 -- the extension's "not pinned"
    local p = tonumber(pinned)
    if p and p > 0 then
      return p
    end
  end
  local t = redis.call('TIME')
  return t[1] * 1000000 + t[2]
end

-- Greatest common divisor of two whole numbers.
local function rl_gcd(a, b)
  while b ~= 0 do
    a, b = b, a % b
  end
  return a
end

-- Microseconds to whole milliseconds, rounded up, never negative.
local function rl_ms(us)
  if us <= 0 then
    return 0
  end
  return math.ceil(us / 1000)
end

-- A limiter's state: its three numbers, or, when the key still holds the
-- hash that 0.2.0 wrote (GET answers WRONGTYPE), the hash's fields f1,
-- f2, f3, which mean the same numbers.  nil when there is no state.  The
-- next write replaces the hash with the string.
local function rl_read(key, f1, f2, f3)
  local st = redis.pcall('GET', key)
  if st == false then
    return nil
  end
  if type(st) == 'string' then
    if #st == 25 then
      local tag, a, b, c = struct.unpack('<Bddd', st)
      if tag == 1 then
        return a, b, c
      end
    end
    -- Not a state of ours: HMGET below refuses it with WRONGTYPE.
  elseif not string.find(st.err or '', 'WRONGTYPE', 1, true) then
    -- Any other error (an ACL refusal, say) as Redis words it.
    redis.call('GET', key)
  end
  local h = redis.call('HMGET', key, f1, f2, f3 or f2)
  return tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
end

-- The state string of three numbers.
local function rl_state(a, b, c)
  return struct.pack('<Bddd', 1, a, b, c)
end

-- A named policy's limiter (0.5.0, "carry") keeps its state across a
-- change of the policy's limit, window or burst (doc/algorithms.md, "When
-- a policy changes").  Its key names the policy, not the parameters, so
-- its state records what the conversion needs beside the algorithm's
-- numbers: struct.pack('<Bdddd', 2, a, b, c, d), tag 2, four doubles.
-- A parameter form's key never holds one (its keys name its parameters,
-- and a 0.4.0 server reads only those).  A state read under parameters
-- other than its own is converted, rounding toward less room, and written
-- back at once as the new parameters' state (with their TTL), so that a
-- later call, admitted or not, reads what this one read.  The sliding log
-- is the same log in both forms: it has no parameters.

-- A carried state's four numbers; nil when the key holds none.  Another
-- value is refused as Redis refuses a hash command on a string.
local function rl_carry_read(key)
  local st = redis.call('GET', key)
  if not st then
    return nil
  end
  if #st == 33 then
    local tag, a, b, c, d = struct.unpack('<Bdddd', st)
    if tag == 2 then
      return a, b, c, d
    end
  end
  redis.call('HGET', key, 'w')
end

-- The state string of a carried state.
local function rl_carry_state(a, b, c, d)
  return struct.pack('<Bdddd', 2, a, b, c, d)
end

-- v kept in units of 1/from, in units of 1/to, rounded up (more used,
-- less room): exact while v x to stays below 2^53 (every product of a
-- state and a scale the extension admits but the extreme), else through
-- the quotient and two units more than it, which covers its rounding.
local function rl_up(v, from, to)
  if from == to then
    return v
  end
  local x = v * to
  if x < 9007199254740992 then
    return math.ceil(x / from)
  end
  return math.ceil(v / from * to) + 2
end

-- Writes an algorithm's new state: a string, set with its TTL (the time
-- until the state is fresh again) in one command, or, for the sliding
-- log, the function that writes it.
local function rl_write(key, state, reset)
  if type(state) == 'string' then
    redis.call('SET', key, state, 'PX', math.max(1, rl_ms(reset)))
  else
    state()
  end
end

-- One check of one limiter, from its algorithm's result: a denial
-- consumes nothing; an admission writes the new state.  A peek (cost 0)
-- is always admitted, also when a lowered limit leaves the state above
-- it.  Returns allowed 0/1, remaining, retry_after_ms, reset_after_ms and
-- the receipt r1, r2.
--
-- The receipt: what an admitted call of cost > 0 took, so that a refund
-- (refund.lua) gives it back to the very window or member it went to.
-- An algorithm returns it after its state, as whole numbers below 2^53
-- (nil: 0): fixed_window and sliding_counter the start of the window
-- charged, sliding_log the time and cum of the member written; the
-- buckets and GCRA the state's time and the debt (tokens missing, level)
-- it then held, in credit units (rl_refund_give).  A call that took
-- nothing (denied, cost 0) has 0, 0.
local function rl_one(key, cost, ok, remaining, retry, reset, state, r1, r2)
  if not ok and cost > 0 then
    return 0, math.max(0, remaining), math.max(1, rl_ms(retry)), rl_ms(reset),
           0, 0
  end
  if ok and state then
    rl_write(key, state, reset)
  end
  if cost == 0 then
    return 1, math.max(0, remaining), 0, rl_ms(reset), 0, 0
  end
  return 1, math.max(0, remaining), 0, rl_ms(reset), r1 or 0, r2 or 0
end

-- A refund (refund.lua) reads a state as it was written, at its own
-- time: the numbers of a string of the tag and n doubles (3, or 4),
-- nil when the key holds none.  A 0.2.0 hash (WRONGTYPE) or a value of
-- another form has nothing to give back; any other error is raised as
-- Redis words it.
local function rl_refund_read(key, tag, n)
  local st = redis.pcall('GET', key)
  if type(st) == 'table' then
    if not string.find(st.err or '', 'WRONGTYPE', 1, true) then
      redis.call('GET', key)
    end
    return nil
  end
  if st and #st == 1 + 8 * n then
    local t, a, b, c, d = struct.unpack(n == 3 and '<Bddd' or '<Bdddd', st)
    if t == tag then
      return a, b, c, d
    end
  end
  return nil
end

-- What a bucket's or GCRA's refund gives back, in credit units: the
-- cost, but no more than the debt the admitted call left (r2, at the
-- state's time r1, its receipt) less what drained or refilled between r1
-- and ts, the time of the state the refund finds.  Each call between
-- them only added to the debt, so that is the least of the call's cost
-- the state still holds: a bucket that was full again meanwhile has
-- already given that room back, and a refund of the whole cost would
-- leave more room than a limiter that never saw the call.
local function rl_refund_give(cost, unit, rate, r1, r2, ts)
  local give = cost * unit
  local left = r2 - math.max(0, ts - r1) * rate
  if left < give then
    give = math.max(0, left)
  end
  return give
end

-- Writes a refunded state, or deletes the key when the state is now that
-- of a fresh limiter (nil).  The key keeps its TTL: a refund only gives
-- room back, so the state never needs to live longer than the check that
-- wrote it said, and the key existed (no key is ever left without one).
-- The TTL is read and written again (SET ... KEEPTTL needs Redis 6.0).
-- Returns true when the state changed.
local function rl_refund_write(key, state)
  if not state then
    redis.call('DEL', key)
    return true
  end
  local ttl = redis.call('PTTL', key)
  if ttl <= 0 then
    return false
  end
  redis.call('SET', key, state, 'PX', ttl)
  return true
end
