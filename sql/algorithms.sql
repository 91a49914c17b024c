--
-- algorithms: every algorithm against numbers worked out by hand from its
-- definition (lua/*.lua).  Each comment gives the expected row as
-- (allowed,remaining,retry_after_ms,reset_after_ms).
--
-- The clock is pinned: T0 = 1800000000000 ms, a whole multiple of 10 s
-- and of 1 minute, so fixed windows start at T0.  Redis still expires keys
-- in real time, so every key that a later step reads has a TTL of seconds.
--
-- Per algorithm, limit L = 5 and window W = 10 s unless said otherwise:
--   <algo>:s  the sequence, denial, and retry_after exactness
--   <algo>:c  cost > 1
--   <algo>:p  a peek (cost 0) on a fresh key
--   <algo>:r  reset_after exactness
--   <algo>:b  a clock that moves back
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;
-- Every key lives under this database's OID, new for each pg_regress run,
-- so no state of an earlier run can leak in.

------------------------------------------------------------------------
-- fixed_window: windows [T0, T0+10 s), ...; used + cost <= L per window;
-- retry and reset = end of window - now.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- (t,4,0,10000) (t,3,0,10000) (t,2,0,10000) (t,1,0,10000) (t,0,0,10000)
-- (f,0,10000,10000)
SELECT g, rl_allow('fixed_window:s', 'fixed_window', 5, '10 s')
FROM generate_series(1, 6) g;
-- A denied call consumes nothing: peek (t,0,0,10000), two denials
-- (f,0,10000,10000), peek again (t,0,0,10000).
SELECT rl_peek('fixed_window:s', 'fixed_window', 5, '10 s');
SELECT rl_allow('fixed_window:s', 'fixed_window', 5, '10 s')
FROM generate_series(1, 2);
SELECT rl_peek('fixed_window:s', 'fixed_window', 5, '10 s');
-- cost 3: (t,2,0,10000); cost 3 again: 3+3 > 5 (f,2,10000,10000);
-- cost 2: (t,0,0,10000).
SELECT rl_allow('fixed_window:c', 'fixed_window', 5, '10 s', 3);
SELECT rl_allow('fixed_window:c', 'fixed_window', 5, '10 s', 3);
SELECT rl_allow('fixed_window:c', 'fixed_window', 5, '10 s', 2);
-- Fresh key, cost 0: (t,5,0,0) both ways.
SELECT rl_peek('fixed_window:p', 'fixed_window', 5, '10 s'),
	   rl_allow('fixed_window:p', 'fixed_window', 5, '10 s', 0);
-- Keys for the reset and clock steps, filled at T0: (t,0,0,10000) each.
SELECT rl_allow('fixed_window:r', 'fixed_window', 5, '10 s', 5);
SELECT rl_allow('fixed_window:b', 'fixed_window', 5, '10 s', 5);
-- retry_after 10000: at T0+9999 ms still denied, 1 ms left (f,0,1,1);
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_allow('fixed_window:s', 'fixed_window', 5, '10 s');
-- at T0+10000 ms a new window: (t,4,0,10000).
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_allow('fixed_window:s', 'fixed_window', 5, '10 s');
-- reset_after 10000: at T0+9999 (t,0,0,1), at T0+10000 fresh (t,5,0,0).
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_peek('fixed_window:r', 'fixed_window', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_peek('fixed_window:r', 'fixed_window', 5, '10 s');
-- Clock back to T0-5 s: the call still counts in the newest window
-- [T0, T0+10 s), which is full: (f,0,15000,15000), 15 s being the time
-- from T0-5 s to T0+10 s.  Back at T0 nothing was granted: (f,0,10000,10000).
SET ratelimit.test_clock_ms = 1799999995000;
SELECT rl_allow('fixed_window:b', 'fixed_window', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000000000;
SELECT rl_allow('fixed_window:b', 'fixed_window', 5, '10 s');

------------------------------------------------------------------------
-- sliding_log: units in (now - W, now] plus cost <= L; retry = time until
-- enough of the oldest units leave; reset = newest + W - now.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- (t,4,0,10000) (t,3,0,10000) (t,2,0,10000) (t,1,0,10000) (t,0,0,10000)
-- (f,0,10000,10000)
SELECT g, rl_allow('sliding_log:s', 'sliding_log', 5, '10 s')
FROM generate_series(1, 6) g;
-- peek (t,0,0,10000), denials (f,0,10000,10000), peek (t,0,0,10000).
SELECT rl_peek('sliding_log:s', 'sliding_log', 5, '10 s');
SELECT rl_allow('sliding_log:s', 'sliding_log', 5, '10 s')
FROM generate_series(1, 2);
SELECT rl_peek('sliding_log:s', 'sliding_log', 5, '10 s');
-- cost 3: (t,2,0,10000); cost 3: needs 1 unit to leave, at T0+10 s:
-- (f,2,10000,10000); cost 2: (t,0,0,10000).
SELECT rl_allow('sliding_log:c', 'sliding_log', 5, '10 s', 3);
SELECT rl_allow('sliding_log:c', 'sliding_log', 5, '10 s', 3);
SELECT rl_allow('sliding_log:c', 'sliding_log', 5, '10 s', 2);
-- Fresh key, cost 0: (t,5,0,0) both ways.
SELECT rl_peek('sliding_log:p', 'sliding_log', 5, '10 s'),
	   rl_allow('sliding_log:p', 'sliding_log', 5, '10 s', 0);
-- (t,0,0,10000) each.
SELECT rl_allow('sliding_log:r', 'sliding_log', 5, '10 s', 5);
SELECT rl_allow('sliding_log:b', 'sliding_log', 5, '10 s', 5);
-- retry_after 10000: at T0+9999 (f,0,1,1); at T0+10000 the units at T0
-- are out of (T0, T0+10 s]: (t,4,0,10000).
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_allow('sliding_log:s', 'sliding_log', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_allow('sliding_log:s', 'sliding_log', 5, '10 s');
-- reset_after 10000: at T0+9999 (t,0,0,1), at T0+10000 (t,5,0,0).
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_peek('sliding_log:r', 'sliding_log', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_peek('sliding_log:r', 'sliding_log', 5, '10 s');
-- Clock back to T0-5 s: the 5 units at T0 are still in the window, so
-- denied; the call could pass at T0+10 s, 15000 ms later, and the log is
-- empty then too: (f,0,15000,15000).  At T0: (f,0,10000,10000).
SET ratelimit.test_clock_ms = 1799999995000;
SELECT rl_allow('sliding_log:b', 'sliding_log', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000000000;
SELECT rl_allow('sliding_log:b', 'sliding_log', 5, '10 s');

-- Many units in one microsecond (a pinned clock; with Redis TIME, every
-- call after the clock stepped back is stamped with the newest entry's
-- time): each unit is still one entry.  15 per minute, 30 calls: 15
-- allowed, then the peek (t,0,0,60000).  cost 12 then 3 then 1:
-- (t,3,0,60000) (t,0,0,60000) (f,0,60000,60000).
SET ratelimit.test_clock_ms = 1800000000000;
SELECT count(*) FILTER (WHERE (rl_allow('sliding_log:many', 'sliding_log', 15,
										'1 minute')).allowed) AS allowed
FROM generate_series(1, 30);
SELECT rl_peek('sliding_log:many', 'sliding_log', 15, '1 minute');
SELECT g, rl_allow('sliding_log:many12', 'sliding_log', 15, '1 minute',
				   (ARRAY[12, 3, 1])[g])
FROM generate_series(1, 3) g;

------------------------------------------------------------------------
-- sliding_counter: weighted = prev x (W - elapsed)/W + cur, admitted if
-- weighted + cost <= L.  A unit counted in window k weighs until the end
-- of window k+1, so reset = end of the next window - now.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- (t,4,0,20000) (t,3,0,20000) (t,2,0,20000) (t,1,0,20000) (t,0,0,20000)
-- 6th: cur = 5, so it must wait for the next window, where prev = 5 must
-- weigh <= 4: 5 x (W - e)/W <= 4 at e = 2 s, so at T0+12 s:
-- (f,0,12000,20000).
SELECT g, rl_allow('sliding_counter:s', 'sliding_counter', 5, '10 s')
FROM generate_series(1, 6) g;
-- peek (t,0,0,20000), denials (f,0,12000,20000), peek (t,0,0,20000).
SELECT rl_peek('sliding_counter:s', 'sliding_counter', 5, '10 s');
SELECT rl_allow('sliding_counter:s', 'sliding_counter', 5, '10 s')
FROM generate_series(1, 2);
SELECT rl_peek('sliding_counter:s', 'sliding_counter', 5, '10 s');
-- cost 3: (t,2,0,20000).  cost 3 again: 3+3 > 5; next window prev = 3
-- must weigh <= 2: 3 x (W - e)/W <= 2 at e = 10/3 s = 3333.33 ms, rounded
-- up: 10000 + 3334 = 13334: (f,2,13334,20000).  cost 2: (t,0,0,20000).
SELECT rl_allow('sliding_counter:c', 'sliding_counter', 5, '10 s', 3);
SELECT rl_allow('sliding_counter:c', 'sliding_counter', 5, '10 s', 3);
SELECT rl_allow('sliding_counter:c', 'sliding_counter', 5, '10 s', 2);
-- Fresh key, cost 0: (t,5,0,0) both ways.
SELECT rl_peek('sliding_counter:p', 'sliding_counter', 5, '10 s'),
	   rl_allow('sliding_counter:p', 'sliding_counter', 5, '10 s', 0);
-- (t,0,0,20000) each.
SELECT rl_allow('sliding_counter:r', 'sliding_counter', 5, '10 s', 5);
SELECT rl_allow('sliding_counter:b', 'sliding_counter', 5, '10 s', 5);
-- retry_after 12000.  At T0+11999: prev = 5 weighs 5 x 8001/10000 =
-- 4.0005, + 1 > 5: denied, 1 ms to go; remaining 5 - ceil(4.0005) = 0;
-- reset = the rest of the previous window's weight, 8001 ms: (f,0,1,8001).
SET ratelimit.test_clock_ms = 1800000011999;
SELECT rl_allow('sliding_counter:s', 'sliding_counter', 5, '10 s');
-- At T0+12000: 5 x 0.8 = 4, + 1 = 5: (t,0,0,18000) (cur = 1 weighs until
-- T0+30 s).
SET ratelimit.test_clock_ms = 1800000012000;
SELECT rl_allow('sliding_counter:s', 'sliding_counter', 5, '10 s');
-- reset_after 20000: at T0+19999 prev = 5 weighs 5 x 1/10000 (ceil 1):
-- (t,4,0,1); at T0+20000 fresh: (t,5,0,0).
SET ratelimit.test_clock_ms = 1800000019999;
SELECT rl_peek('sliding_counter:r', 'sliding_counter', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000020000;
SELECT rl_peek('sliding_counter:r', 'sliding_counter', 5, '10 s');
-- Clock back to T0-5 s: still counted in the window of T0 with cur = 5:
-- denied.  By this clock the call passes at T0+12 s, 17000 ms later, and
-- the state is fresh at T0+20 s, 25000 ms later: (f,0,17000,25000).
-- At T0: (f,0,12000,20000).
SET ratelimit.test_clock_ms = 1799999995000;
SELECT rl_allow('sliding_counter:b', 'sliding_counter', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000000000;
SELECT rl_allow('sliding_counter:b', 'sliding_counter', 5, '10 s');

------------------------------------------------------------------------
-- token_bucket: starts full (5), refills 5 per 10 s = one token per 2 s;
-- reset = time to refill to full.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- (t,4,0,2000) (t,3,0,4000) (t,2,0,6000) (t,1,0,8000) (t,0,0,10000)
-- (f,0,2000,10000)
SELECT g, rl_allow('token_bucket:s', 'token_bucket', 5, '10 s')
FROM generate_series(1, 6) g;
-- peek (t,0,0,10000), denials (f,0,2000,10000), peek (t,0,0,10000).
SELECT rl_peek('token_bucket:s', 'token_bucket', 5, '10 s');
SELECT rl_allow('token_bucket:s', 'token_bucket', 5, '10 s')
FROM generate_series(1, 2);
SELECT rl_peek('token_bucket:s', 'token_bucket', 5, '10 s');
-- cost 3: 2 tokens left (t,2,0,6000); cost 3: one token short, 2 s
-- (f,2,2000,6000); cost 2: (t,0,0,10000).
SELECT rl_allow('token_bucket:c', 'token_bucket', 5, '10 s', 3);
SELECT rl_allow('token_bucket:c', 'token_bucket', 5, '10 s', 3);
SELECT rl_allow('token_bucket:c', 'token_bucket', 5, '10 s', 2);
-- Fresh key, cost 0: (t,5,0,0) both ways.
SELECT rl_peek('token_bucket:p', 'token_bucket', 5, '10 s'),
	   rl_allow('token_bucket:p', 'token_bucket', 5, '10 s', 0);
-- (t,0,0,10000) each.
SELECT rl_allow('token_bucket:r', 'token_bucket', 5, '10 s', 5);
SELECT rl_allow('token_bucket:b', 'token_bucket', 5, '10 s', 5);
-- retry_after 2000.  At T0+1999: 0.9995 token, 1 ms short; full again in
-- 10000 - 1999 = 8001 ms: (f,0,1,8001).
SET ratelimit.test_clock_ms = 1800000001999;
SELECT rl_allow('token_bucket:s', 'token_bucket', 5, '10 s');
-- At T0+2000: one token, taken: (t,0,0,10000).
SET ratelimit.test_clock_ms = 1800000002000;
SELECT rl_allow('token_bucket:s', 'token_bucket', 5, '10 s');
-- reset_after 10000: at T0+9999 4.9995 tokens (t,4,0,1); at T0+10000
-- (t,5,0,0).
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_peek('token_bucket:r', 'token_bucket', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_peek('token_bucket:r', 'token_bucket', 5, '10 s');
-- Clock back to T0-5 s: no refill for going back, so 0 tokens: denied.
-- By this clock the bucket refills from T0 on: one token at T0+2 s
-- (7000 ms), full at T0+10 s (15000 ms): (f,0,7000,15000).
-- At T0: (f,0,2000,10000).
SET ratelimit.test_clock_ms = 1799999995000;
SELECT rl_allow('token_bucket:b', 'token_bucket', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000000000;
SELECT rl_allow('token_bucket:b', 'token_bucket', 5, '10 s');

------------------------------------------------------------------------
-- leaky_bucket: starts empty, holds 5, drains 5 per 10 s = one unit per
-- 2 s; reset = time to drain empty.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- (t,4,0,2000) (t,3,0,4000) (t,2,0,6000) (t,1,0,8000) (t,0,0,10000)
-- (f,0,2000,10000)
SELECT g, rl_allow('leaky_bucket:s', 'leaky_bucket', 5, '10 s')
FROM generate_series(1, 6) g;
-- peek (t,0,0,10000), denials (f,0,2000,10000), peek (t,0,0,10000).
SELECT rl_peek('leaky_bucket:s', 'leaky_bucket', 5, '10 s');
SELECT rl_allow('leaky_bucket:s', 'leaky_bucket', 5, '10 s')
FROM generate_series(1, 2);
SELECT rl_peek('leaky_bucket:s', 'leaky_bucket', 5, '10 s');
-- cost 3: level 3 (t,2,0,6000); cost 3: one unit over, 2 s
-- (f,2,2000,6000); cost 2: (t,0,0,10000).
SELECT rl_allow('leaky_bucket:c', 'leaky_bucket', 5, '10 s', 3);
SELECT rl_allow('leaky_bucket:c', 'leaky_bucket', 5, '10 s', 3);
SELECT rl_allow('leaky_bucket:c', 'leaky_bucket', 5, '10 s', 2);
-- Fresh key, cost 0: (t,5,0,0) both ways.
SELECT rl_peek('leaky_bucket:p', 'leaky_bucket', 5, '10 s'),
	   rl_allow('leaky_bucket:p', 'leaky_bucket', 5, '10 s', 0);
-- (t,0,0,10000) each.
SELECT rl_allow('leaky_bucket:r', 'leaky_bucket', 5, '10 s', 5);
SELECT rl_allow('leaky_bucket:b', 'leaky_bucket', 5, '10 s', 5);
-- retry_after 2000.  At T0+1999: level 4.0005, 1 ms short; empty in
-- 8001 ms: (f,0,1,8001).  At T0+2000: (t,0,0,10000).
SET ratelimit.test_clock_ms = 1800000001999;
SELECT rl_allow('leaky_bucket:s', 'leaky_bucket', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000002000;
SELECT rl_allow('leaky_bucket:s', 'leaky_bucket', 5, '10 s');
-- reset_after 10000: at T0+9999 level 0.0005 (t,4,0,1); at T0+10000
-- (t,5,0,0).
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_peek('leaky_bucket:r', 'leaky_bucket', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_peek('leaky_bucket:r', 'leaky_bucket', 5, '10 s');
-- Clock back to T0-5 s: no draining for going back, level 5: denied.
-- By this clock it drains from T0 on: room for one at T0+2 s (7000 ms),
-- empty at T0+10 s (15000 ms): (f,0,7000,15000).  At T0: (f,0,2000,10000).
SET ratelimit.test_clock_ms = 1799999995000;
SELECT rl_allow('leaky_bucket:b', 'leaky_bucket', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000000000;
SELECT rl_allow('leaky_bucket:b', 'leaky_bucket', 5, '10 s');

------------------------------------------------------------------------
-- gcra: emission interval T = W/L = 2 s, burst L; a call of cost c passes
-- if max(TAT, now) + c x T - now <= W; reset = TAT - now.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- (t,4,0,2000) (t,3,0,4000) (t,2,0,6000) (t,1,0,8000) (t,0,0,10000)
-- (f,0,2000,10000)
SELECT g, rl_allow('gcra:s', 'gcra', 5, '10 s')
FROM generate_series(1, 6) g;
-- peek (t,0,0,10000), denials (f,0,2000,10000), peek (t,0,0,10000).
SELECT rl_peek('gcra:s', 'gcra', 5, '10 s');
SELECT rl_allow('gcra:s', 'gcra', 5, '10 s')
FROM generate_series(1, 2);
SELECT rl_peek('gcra:s', 'gcra', 5, '10 s');
-- cost 3: TAT = T0+6 s (t,2,0,6000); cost 3: 6+6 > 10 s by 2 s
-- (f,2,2000,6000); cost 2: (t,0,0,10000).
SELECT rl_allow('gcra:c', 'gcra', 5, '10 s', 3);
SELECT rl_allow('gcra:c', 'gcra', 5, '10 s', 3);
SELECT rl_allow('gcra:c', 'gcra', 5, '10 s', 2);
-- Fresh key, cost 0: (t,5,0,0) both ways.
SELECT rl_peek('gcra:p', 'gcra', 5, '10 s'),
	   rl_allow('gcra:p', 'gcra', 5, '10 s', 0);
-- (t,0,0,10000) each.
SELECT rl_allow('gcra:r', 'gcra', 5, '10 s', 5);
SELECT rl_allow('gcra:b', 'gcra', 5, '10 s', 5);
-- retry_after 2000.  At T0+1999: TAT - now = 8001 ms, + 2000 > 10000 by
-- 1 ms: (f,0,1,8001).  At T0+2000: (t,0,0,10000).
SET ratelimit.test_clock_ms = 1800000001999;
SELECT rl_allow('gcra:s', 'gcra', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000002000;
SELECT rl_allow('gcra:s', 'gcra', 5, '10 s');
-- reset_after 10000: at T0+9999 TAT - now = 1 ms (t,4,0,1); at T0+10000
-- (t,5,0,0).
SET ratelimit.test_clock_ms = 1800000009999;
SELECT rl_peek('gcra:r', 'gcra', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000010000;
SELECT rl_peek('gcra:r', 'gcra', 5, '10 s');
-- Clock back to T0-5 s: TAT = T0+10 s is 15 s away, + 2 s > 10 s by 7 s:
-- (f,0,7000,15000).  At T0: (f,0,2000,10000).
SET ratelimit.test_clock_ms = 1799999995000;
SELECT rl_allow('gcra:b', 'gcra', 5, '10 s');
SET ratelimit.test_clock_ms = 1800000000000;
SELECT rl_allow('gcra:b', 'gcra', 5, '10 s');

------------------------------------------------------------------------
-- Odd rates: retry_after is rounded up to the next whole millisecond.
------------------------------------------------------------------------
-- gcra 3 per 1 s (T = 333.33 ms), in one statement so that the keys'
-- real-time TTL (1 s) cannot matter: cost 3 (t,0,0,1000), then cost 1
-- waits 333.33 ms: (f,0,334,1000).
SET ratelimit.test_clock_ms = 1800000000000;
SELECT g, rl_allow('odd:gcra1s', 'gcra', 3, '1 s',
				   CASE g WHEN 1 THEN 3 ELSE 1 END)
FROM generate_series(1, 2) g;
-- 3 per 10 s (one unit per 3333.33 ms): three calls leave 2, 1, 0 with
-- reset 3334, 6667, 10000 for the buckets and gcra; the 4th waits 3334.
SELECT a, g, rl_allow('odd:' || a, a, 3, '10 s')
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 generate_series(1, 4) g
ORDER BY a, g;
-- At T0+3333: 0.9999 unit, 1 ms short: (f,0,1,6667) each.
SET ratelimit.test_clock_ms = 1800000003333;
SELECT a, rl_allow('odd:' || a, a, 3, '10 s')
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a ORDER BY a;
-- At T0+3334: allowed, (t,0,0,10000) each.
SET ratelimit.test_clock_ms = 1800000003334;
SELECT a, rl_allow('odd:' || a, a, 3, '10 s')
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a ORDER BY a;
-- sliding_counter 3 per 10 s at T0: (t,2,0,20000) (t,1,0,20000)
-- (t,0,0,20000); the 4th must wait for the next window, where prev = 3
-- must weigh <= 2: 3 x (W - e)/W <= 2 at e = 3333.33 ms, so at T0+13333.33,
-- rounded up: (f,0,13334,20000).  At T0+13333 prev weighs 3 x 6667/10000
-- = 2.0001: 0.33 us short (f,0,1,6667); at T0+13334 it weighs 1.9998
-- (t,0,0,16666), cur = 1 weighing until T0+30 s.
SET ratelimit.test_clock_ms = 1800000000000;
SELECT g, rl_allow('odd:sliding_counter', 'sliding_counter', 3, '10 s')
FROM generate_series(1, 4) g;
SET ratelimit.test_clock_ms = 1800000013333;
SELECT rl_allow('odd:sliding_counter', 'sliding_counter', 3, '10 s');
SET ratelimit.test_clock_ms = 1800000013334;
SELECT rl_allow('odd:sliding_counter', 'sliding_counter', 3, '10 s');

------------------------------------------------------------------------
-- The largest limits: 1e9 (100000 for sliding_log) per day and per 366
-- days, one call of cost 1 and one of cost 2 on fresh keys, leaving
-- 999999999 and 999999998 (99999, 99998).  (One call per key: a bucket
-- key of 1e9 per day is fresh again after 86.4 us, so its TTL is 1 ms.)
-- T0 lies 28800000 ms into its day window and 29145600000 ms into its
-- 366-day window, which leaves 57600000 and 2476800000 ms of them.
--   fixed_window     reset = rest of the window
--   sliding_log      reset = the window
--   sliding_counter  reset = rest of the window + the window
--                    (144000000 and 34099200000 ms)
--   buckets, gcra    reset = cost x window / limit: 86.4 and 172.8 us
--                    (1 ms, 1 ms) per day; 31.6 and 63.2 ms (32, 64)
--                    per 366 days
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT a, w, c, rl_allow('big:' || a || w || c, a,
						 CASE a WHEN 'sliding_log' THEN 100000
						 ELSE 1000000000 END, w::interval, c)
FROM unnest(ARRAY['fixed_window', 'sliding_log', 'sliding_counter',
				  'token_bucket', 'leaky_bucket', 'gcra'])
		 WITH ORDINALITY x(a, ord),
	 unnest(ARRAY['1 day', '366 days']) w,
	 generate_series(1, 2) c
ORDER BY ord, w, c;
-- With state (TTLs of minutes): 1e9 per day, cost 1000000 then cost 1:
-- (t,999000000,0,86400) (t,998999999,0,86401), 1000001 x 86.4 us being
-- 86400.09 ms; 1e9 per 366 days, cost 999999 then cost 1:
-- (t,999000001,0,31622369) (t,999000000,0,31622400), 999999 x 31.6224 ms
-- being 31622368.4 ms.
SELECT a, w, g, rl_allow('big3:' || a || w, a, 1000000000, w::interval,
						 CASE WHEN g = 2 THEN 1
							  WHEN w = '1 day' THEN 1000000 ELSE 999999 END)
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra'])
		 WITH ORDINALITY x(a, ord),
	 unnest(ARRAY['1 day', '366 days']) w,
	 generate_series(1, 2) g
ORDER BY ord, w, g;
-- All but one unit, then the last one, then nothing (1e9 per day):
-- buckets and gcra (t,1,0,86400000) (t,0,0,86400000), then one unit is
-- 86.4 us away (f,0,1,86400000).
SELECT a, g, rl_allow('big2:' || a, a, 1000000000, '1 day',
					  CASE g WHEN 1 THEN 999999999 ELSE 1 END)
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra'])
		 WITH ORDINALITY x(a, ord),
	 generate_series(1, 3) g
ORDER BY ord, g;

------------------------------------------------------------------------
-- The edge: 5 per minute, six attempts at each of four moments (offsets
-- from T0; a window edge at 60 s and at 120 s):
--   50 s (10 s before the edge), 60 s (the edge), 110 s, 120 s.
-- Hand-computed units allowed at each moment:
--   fixed_window     5 5 0 5   10 within 10 s: the 2 x limit edge burst
--   sliding_log      5 0 5 0   the units of 50 s leave at 110 s
--   sliding_counter  5 0 4 1   at 110 s prev = 5 weighs 5 x 10/60 = 0.83,
--                              so 4 fit (4.83 <= 5); at 120 s prev = 4
--                              weighs 4, so 1 fits
--   token_bucket     5 0 5 0   10 s refills 0.83 token; 60 s refills all
--   leaky_bucket     5 0 5 0   the same, draining
--   gcra             5 0 5 0   TAT = 50 s + 60 s = 110 s
------------------------------------------------------------------------
CREATE TEMP TABLE edge (algo text, ord int, at_s int, allowed bigint);
CREATE TEMP TABLE algos (algo text, ord int);
INSERT INTO algos VALUES ('fixed_window', 1), ('sliding_log', 2),
	('sliding_counter', 3), ('token_bucket', 4), ('leaky_bucket', 5),
	('gcra', 6);
SET ratelimit.test_clock_ms = 1800000050000;
INSERT INTO edge
SELECT algo, ord, 50, count(*) FILTER (WHERE (rl_allow(algo || ':edge', algo,
												5, '1 minute')).allowed)
FROM algos, generate_series(1, 6) GROUP BY algo, ord;
SET ratelimit.test_clock_ms = 1800000060000;
INSERT INTO edge
SELECT algo, ord, 60, count(*) FILTER (WHERE (rl_allow(algo || ':edge', algo,
												5, '1 minute')).allowed)
FROM algos, generate_series(1, 6) GROUP BY algo, ord;
SET ratelimit.test_clock_ms = 1800000110000;
INSERT INTO edge
SELECT algo, ord, 110, count(*) FILTER (WHERE (rl_allow(algo || ':edge', algo,
												 5, '1 minute')).allowed)
FROM algos, generate_series(1, 6) GROUP BY algo, ord;
SET ratelimit.test_clock_ms = 1800000120000;
INSERT INTO edge
SELECT algo, ord, 120, count(*) FILTER (WHERE (rl_allow(algo || ':edge', algo,
												 5, '1 minute')).allowed)
FROM algos, generate_series(1, 6) GROUP BY algo, ord;
SELECT algo,
	   sum(allowed) FILTER (WHERE at_s = 50) AS "50s",
	   sum(allowed) FILTER (WHERE at_s = 60) AS "60s",
	   sum(allowed) FILTER (WHERE at_s = 110) AS "110s",
	   sum(allowed) FILTER (WHERE at_s = 120) AS "120s"
FROM edge GROUP BY algo, ord ORDER BY ord;
-- The most units in any interval (t - 60 s, t]: 10 for fixed_window,
-- 5 for every other algorithm.
SELECT e1.algo, max(s.units) AS most_in_a_window
FROM edge e1,
	 LATERAL (SELECT sum(e2.allowed) AS units FROM edge e2
			  WHERE e2.algo = e1.algo AND e2.at_s > e1.at_s - 60
				AND e2.at_s <= e1.at_s) s
GROUP BY e1.algo, e1.ord ORDER BY e1.ord;

------------------------------------------------------------------------
-- sliding_log never exceeds its limit in any window-length interval: 120
-- calls of cost 1, 2 or 3, one every 1.3 s, 5 per 10 s, checked call by
-- call against a model of the definition (units in (t - 10 s, t] plus
-- cost <= 5).
------------------------------------------------------------------------
CREATE TEMP TABLE log_calls (i int, t bigint, cost int, allowed boolean,
							 model boolean);
DO $$
DECLARE
	now_ms bigint;
	c int;
	used bigint;
BEGIN
	FOR i IN 0..119 LOOP
		now_ms := 1800000200000 + i * 1300;
		c := 1 + i % 3;
		SELECT coalesce(sum(l.cost), 0) INTO used FROM log_calls l
		WHERE l.allowed AND l.t > now_ms - 10000;
		PERFORM set_config('ratelimit.test_clock_ms', now_ms::text, false);
		INSERT INTO log_calls
		SELECT i, now_ms, c, r.allowed, used + c <= 5
		FROM rl_allow('sliding_log:dense', 'sliding_log', 5, '10 s', c) r;
	END LOOP;
END
$$;
SELECT count(*) AS calls,
	   count(*) FILTER (WHERE allowed) AS allowed,
	   count(*) FILTER (WHERE allowed <> model) AS differ_from_model
FROM log_calls;
SELECT max(s.units) AS most_in_a_window
FROM log_calls l1,
	 LATERAL (SELECT sum(cost) AS units FROM log_calls l2
			  WHERE l2.allowed AND l2.t > l1.t - 10000 AND l2.t <= l1.t) s;

------------------------------------------------------------------------
-- Another caller's parameters, on the same key and algorithm.  A limiter
-- is its key, algorithm, limit, window and burst, so calls of other
-- parameters are another limiter and touch this one in neither direction.
--
-- Lock-out (issue 11): the largest accepted limit and cost over 366 days
-- at T0, then an honest (10, 1 minute) call 1 ms later.  In 0.1.0 gcra
-- then waited a year and leaky_bucket 190 years; from 0.2.0 to 0.3.0 the
-- honest call still waited up to a window of its own; now it is fresh:
-- (t,9,0,59999) for the fixed window (the minute ends), (t,9,0,60000) for
-- the log (its unit leaves in a minute), (t,9,0,119999) for the counter
-- (the unit weighs until the end of the next minute), and (t,9,0,6000)
-- for the buckets and gcra (full again one unit's 6 s later).
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT algo, rl_allow('hostile:' || algo, algo,
					  CASE algo WHEN 'sliding_log' THEN 100000 ELSE 1000000000 END,
					  '366 days',
					  CASE algo WHEN 'sliding_log' THEN 100000 ELSE 1000000000 END)
FROM algos ORDER BY ord;
SET ratelimit.test_clock_ms = 1800000000001;
SELECT algo, rl_allow('hostile:' || algo, algo, 10, '1 minute')
FROM algos ORDER BY ord;

------------------------------------------------------------------------
-- Undo: an honest limiter of 3 per hour is used up at T0 (three calls
-- admitted, the fourth denied); then one call of the loosest parameters
-- (a billion, or the log's 100000, per millisecond) 1 ms later.  Before
-- 0.4.0 that call rewrote the state under its own parameters, so the
-- honest fifth call, 2 ms after T0, was admitted in every algorithm; now
-- it is denied as the fourth was: (f,0,retry,reset) with the honest
-- limiter's own wait.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT algo, string_agg(r.allowed::text, ',' ORDER BY g) AS honest
FROM algos, generate_series(1, 4) g,
	 LATERAL rl_allow('undo:' || algo, algo, 3, '1 hour', 1 + 0 * g) r
GROUP BY algo, ord ORDER BY ord;
SET ratelimit.test_clock_ms = 1800000000001;
SELECT algo, (rl_allow('undo:' || algo, algo,
					   CASE algo WHEN 'sliding_log' THEN 100000 ELSE 1000000000 END,
					   '1 millisecond')).allowed AS loose
FROM algos ORDER BY ord;
SET ratelimit.test_clock_ms = 1800000000002;
SELECT algo, rl_allow('undo:' || algo, algo, 3, '1 hour')
FROM algos ORDER BY ord;

RESET ratelimit.test_clock_ms;
DROP TABLE edge, algos, log_calls;
