-- concurrency.lua
--
-- Concurrency (0.6.0): at most `limit` units held at once, each admitted
-- call a holder of its cost until its transaction ends (the extension
-- releases it then, commit or abort, through refund.lua: src/rl_refund.c)
-- or until its lease, the window, runs out, for a holder whose release
-- never came (its backend died, Redis could not be reached).
--
-- A holder is a sliding log's entry: admitted at t, it counts in every
-- window (now - window, now] that holds t, that is until t + window, its
-- lease's end; a release is the sliding log's refund of that entry
-- (refund.lua sends it to sliding_log_refund_many).  So
-- the state, its TTL, its bounds (at most the limit's entries) and its
-- answers are sliding_log.lua's: remaining is the free units, and a
-- denial's wait the time until enough leases end, an upper bound, since a
-- release frees its units at once.  The build puts sliding_log.lua before
-- this file in every script that holds it.

local function concurrency(key, limit, window, cost, now, burst, carry)
  return sliding_log(key, limit, window, cost, now, burst, carry)
end
