--
-- local: every entry point on ratelimit.engine = local, with Redis out of
-- reach (port 1, failure_mode error: any use of Redis would be an ERROR
-- 08006 here).  The clock is pinned.  The first part is algorithms.sql's
-- six algorithm sections, statement for statement: its answers are the
-- same as there (expected/algorithms.out), from the C algorithms.
--
LOAD 'ratelimit';
SET ratelimit.engine = local;
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.failure_mode = error;
SET ratelimit.test_clock_ms = 1800000000000;

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
-- The other entry points.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
-- rl_allow_many: a key listed twice sees its first check; 2 per minute:
-- a (t,1) a (t,0) b (t,1) a (f,0,60000).
SELECT * FROM rl_allow_many(ARRAY['many:a', 'many:a', 'many:b', 'many:a'],
							'fixed_window', 2, '1 minute');
-- One cost per key: a is full (f), c takes 2 (t,0).
SELECT * FROM rl_allow_many(ARRAY['many:a', 'many:c'], 'fixed_window', 2,
							'1 minute', ARRAY[1, 2]);

-- Layered: 2 per second and 3 per minute, all or nothing: (t,1,0,60000)
-- (t,0,0,60000) (f,0,1000,60000).
SELECT * FROM rl_allow_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											  ('fixed_window', 3, '1 minute')]::rl_rule[]);
SELECT * FROM rl_allow_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											  ('fixed_window', 3, '1 minute')]::rl_rule[]);
SELECT * FROM rl_allow_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											  ('fixed_window', 3, '1 minute')]::rl_rule[]);
SET ratelimit.test_clock_ms = 1800000001000;
-- The second is free again, the minute is not: (t,0,0,59000), then
-- (f,0,59000,59000).
SELECT * FROM rl_allow_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											  ('fixed_window', 3, '1 minute')]::rl_rule[]);
SELECT * FROM rl_allow_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											  ('fixed_window', 3, '1 minute')]::rl_rule[]);
SELECT * FROM rl_peek_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											 ('fixed_window', 3, '1 minute')]::rl_rule[]);
SELECT rl_reset_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
									   ('fixed_window', 3, '1 minute')]::rl_rule[]);
SELECT * FROM rl_peek_layered('lay:1', ARRAY[('sliding_log', 2, '1 second'),
											 ('fixed_window', 3, '1 minute')]::rl_rule[]);

-- rl_reset: true once, then false; the limiter starts afresh.
SELECT * FROM rl_allow('reset:1', 'token_bucket', 1, '1 hour');
SELECT * FROM rl_allow('reset:1', 'token_bucket', 1, '1 hour');
SELECT rl_reset('reset:1', 'token_bucket', 1, '1 hour'), rl_reset('reset:1', 'token_bucket', 1, '1 hour');
SELECT * FROM rl_allow('reset:1', 'token_bucket', 1, '1 hour');

-- Row trigger: 2 per minute per author; the third row is refused (PT429).
CREATE TABLE local_posts (author_id int, body text);
CREATE TRIGGER local_posts_throttle BEFORE INSERT ON local_posts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'sliding_log', '2', '1 minute');
INSERT INTO local_posts VALUES (1, 'one'), (1, 'two');
INSERT INTO local_posts VALUES (1, 'three');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO local_posts VALUES (2, 'other');
SELECT author_id, count(*) FROM local_posts GROUP BY 1 ORDER BY 1;

-- Statement trigger: 3 rows per minute per author, all rows or none.
CREATE TABLE local_bulk (author_id int, body text);
CREATE TRIGGER local_bulk_throttle AFTER INSERT ON local_bulk
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '3', '1 minute');
INSERT INTO local_bulk SELECT 1 + g % 2, 'row' FROM generate_series(0, 3) g;
-- Author 1 would reach 4: refused, and author 2 is not charged either:
-- the trigger's limiter is rl_peek's of the same parameters, and holds
-- the first statement's 2 rows only (t,1,0,59000).
INSERT INTO local_bulk VALUES (1, 'x'), (1, 'y'), (2, 'z');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_peek('public.local_bulk:author_id=''2''', 'fixed_window', 3, '1 minute');
INSERT INTO local_bulk VALUES (2, 'z');
SELECT author_id, count(*) FROM local_bulk GROUP BY 1 ORDER BY 1;

-- rl_postgrest_guard outside a request falls back to the session user's
-- key: 1 per minute, the second is refused with PGRST.
SELECT rl_postgrest_guard('gcra', 1, '1 minute');
SELECT rl_postgrest_guard('gcra', 1, '1 minute');
\echo :LAST_ERROR_SQLSTATE

-- Nothing is written to WAL: a READ ONLY transaction works and takes no
-- transaction id.
BEGIN READ ONLY;
SELECT * FROM rl_allow('ro:1', 'gcra', 2, '1 minute');
SELECT * FROM rl_allow_layered('ro:2', ARRAY[('gcra', 2, '1 minute')]::rl_rule[]);
SELECT pg_current_xact_id_if_assigned() IS NULL AS no_xid;
COMMIT;

-- Shadow mode: the denial is counted but let through.
SET ratelimit.enforce = off;
SELECT * FROM rl_allow('reset:1', 'token_bucket', 1, '1 hour');
RESET ratelimit.enforce;

-- The sliding log takes the limits it takes on Redis: 1000 calls in a
-- minute, one by one, then the 1001st is denied until the first leaves.
SELECT count(*) FILTER (WHERE allowed) AS allowed, min(remaining)
  FROM generate_series(1, 1001) g,
       LATERAL rl_allow('big:log', 'sliding_log', 1000, '1 minute', 1 + 0 * g);
SELECT * FROM rl_allow('big:log', 'sliding_log', 1000, '1 minute');
SELECT * FROM rl_allow('huge:log', 'sliding_log', 100000, '1 minute', 100000);
SELECT * FROM rl_allow('big:log', 'sliding_log', 100001, '1 minute');
\echo :LAST_ERROR_SQLSTATE
-- Bad input is still refused before anything is looked up.
SELECT * FROM rl_allow('bad', 'gcra', 0, '1 minute');
\echo :LAST_ERROR_SQLSTATE

-- No call went to Redis.
SELECT connected, failures, fail_open, fail_closed FROM rl_status();

DROP TABLE local_posts, local_bulk;
RESET ratelimit.engine;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
RESET ratelimit.failure_mode;
