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

-- The globals every script uses, as locals: a local is read directly,
-- a global is looked up by name on every use.
local math, string, redis, tonumber = math, string, redis, tonumber

-- The clock: Redis TIME, unless the caller pinned one (tests only).
local function rl_clock(pinned)
  local p = tonumber(pinned)
  if p and p > 0 then
    return p
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
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

-- Numbers are stored with every digit (tostring keeps only 14).  All
-- state is whole numbers below 2^53, written as integers: exact, and far
-- cheaper for Redis than the %.17g it would otherwise need.  Formatting
-- is the dearest step of a script that writes many keys, and most values
-- recur (the clock, the scale, a TTL): each is formatted once per run.
local rl_num_text = {}
local function rl_num(x)
  local s = rl_num_text[x]
  if s then
    return s
  end
  if x == math.floor(x) and x > -9007199254740992 and x < 9007199254740992 then
    s = string.format('%d', x)
  else
    s = string.format('%.17g', x)
  end
  if x == x then
    rl_num_text[x] = s
  end
  return s
end

-- Every key carries a TTL: the time until its state is fresh again.
local function rl_expire(key, us)
  redis.call('PEXPIRE', key, rl_num(math.max(1, rl_ms(us))))
end
