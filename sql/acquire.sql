--
-- acquire: rl_acquire, which waits for a slot (issue 14).
--
-- With ratelimit.test_clock_ms set rl_acquire never sleeps: it moves the
-- pinned clock forward by each wait for its own checks, and puts the
-- setting back when it returns.  So these results are what the waits
-- would give, and the suite runs in no time.  Expected rows are given as
-- (allowed,remaining,retry_after_ms,reset_after_ms).
--
-- The clock is pinned: T0 = 1800000000000 ms.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;
SELECT count(rl_reset('acquire:' || k, a, l, w::interval)) AS cleaned
FROM (VALUES ('t', 'token_bucket', 1, '10 s'), ('g', 'gcra', 2, '10 s'),
			 ('f', 'fixed_window', 2, '1 minute'), ('s', 'sliding_log', 2, '10 s'),
			 ('z', 'gcra', 2, '10 s'), ('e', 'gcra', 2, '10 s')) v(k, a, l, w);

CREATE FUNCTION try(expr text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	result text;
	state text;
	msg text;
BEGIN
	EXECUTE format('SELECT (%s)::text', expr) INTO result;
	RETURN result;
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN state || ': ' || msg;
END
$$;

SELECT pg_get_function_arguments('rl_acquire(text,text,bigint,interval,bigint,interval,bigint)'::regprocedure) AS rl_acquire;
SELECT has_function_privilege('public',
	'rl_acquire(text, text, bigint, interval, bigint, interval, bigint)',
	'EXECUTE') AS public_may_call;

------------------------------------------------------------------------
-- token_bucket, 1 per 10 s.  The first call is admitted at once
-- (t,0,0,10000).  The second needs 10 s, more than the default max_wait
-- of 1 s: the denial at once (f,0,10000,10000).  With max_wait 15 s it
-- waits the 10 s and is admitted (t,0,0,10000); the setting is T0 again.
-- Seen from T0 the bucket is then empty until T0+20 s: (t,0,0,20000).
------------------------------------------------------------------------
SELECT * FROM rl_acquire('acquire:t', 'token_bucket', 1, '10 s');
SELECT * FROM rl_acquire('acquire:t', 'token_bucket', 1, '10 s');
SELECT * FROM rl_acquire('acquire:t', 'token_bucket', 1, '10 s', max_wait => '15 s');
SHOW ratelimit.test_clock_ms;
SELECT * FROM rl_peek('acquire:t', 'token_bucket', 1, '10 s');
-- From T0 the next unit is 20 s away: 19.999 s is too short, the denial
-- at once (f,0,20000,20000); 20 s fits (t,0,0,10000).
SELECT * FROM rl_acquire('acquire:t', 'token_bucket', 1, '10 s', max_wait => '19.999 s');
SELECT * FROM rl_acquire('acquire:t', 'token_bucket', 1, '10 s', max_wait => '20 s');

------------------------------------------------------------------------
-- gcra, 2 per 10 s (T = 5 s) with burst 4, cost 3, max_wait 20 s.  At T0
-- (t,1,0,15000).  The second needs 2 more units of room: it waits 10 s
-- and is admitted at T0+10 s with the tolerance full (t,0,0,20000).
------------------------------------------------------------------------
SELECT * FROM rl_acquire('acquire:g', 'gcra', 2, '10 s', 3, '20 s', 4);
SELECT * FROM rl_acquire('acquire:g', 'gcra', 2, '10 s', 3, '20 s', burst => 4);

------------------------------------------------------------------------
-- fixed_window, 2 per minute: (t,1,0,60000) (t,0,0,60000); the third
-- call waits for the next window, 60 s, with max_wait 1 minute
-- (t,1,0,60000).  max_wait 0 is one check, as rl_allow: seen from T0 the
-- window of T0+60 s has a unit left (t,0,0,120000).
------------------------------------------------------------------------
SELECT * FROM rl_acquire('acquire:f', 'fixed_window', 2, '1 minute');
SELECT * FROM rl_acquire('acquire:f', 'fixed_window', 2, '1 minute');
SELECT * FROM rl_acquire('acquire:f', 'fixed_window', 2, '1 minute', max_wait => '1 minute');
SELECT * FROM rl_acquire('acquire:f', 'fixed_window', 2, '1 minute', max_wait => '0');

------------------------------------------------------------------------
-- sliding_log, 2 per 10 s, cost 2, max_wait 30 s: at T0 (t,0,0,10000);
-- the next waits for the entry to leave the window (t,0,0,10000).  Cost 0
-- asks nothing and is admitted at once (t,0,0,20000): seen from T0 the
-- entry written at T0+10 s stays until T0+20 s.
------------------------------------------------------------------------
SELECT * FROM rl_acquire('acquire:s', 'sliding_log', 2, '10 s', 2, '30 s');
SELECT * FROM rl_acquire('acquire:s', 'sliding_log', 2, '10 s', 2, '30 s');
SELECT * FROM rl_acquire('acquire:s', 'sliding_log', 2, '10 s', 0, '30 s');

------------------------------------------------------------------------
-- Shadow mode: every answer is admitted, so nothing waits; remaining and
-- reset are Redis's: seen from T0 the bucket is empty until T0+30 s
-- (t,0,0,30000).
------------------------------------------------------------------------
SET ratelimit.enforce = off;
SELECT * FROM rl_acquire('acquire:t', 'token_bucket', 1, '10 s', max_wait => '0');
RESET ratelimit.enforce;

------------------------------------------------------------------------
-- Errors: 22004 for NULL, 22023 for bad values, and no round trip.
------------------------------------------------------------------------
SELECT calls AS calls0 FROM rl_status() \gset
SELECT n, try(e) FROM (VALUES
	(1, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', 1, NULL)$$),
	(2, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', NULL)$$),
	(3, $$rl_acquire(NULL, 'gcra', 2, '10 s')$$),
	(4, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', max_wait => '-1 s')$$),
	(5, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', max_wait => '1 hour 1 microsecond')$$),
	(6, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', max_wait => '1 mon')$$),
	(7, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', 3)$$),
	(8, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', 5, burst => 4)$$),
	(9, $$rl_acquire('acquire:e', 'fixed_window', 2, '10 s', burst => 4)$$),
	(10, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', burst => 0)$$),
	(11, $$rl_acquire('', 'gcra', 2, '10 s')$$),
	(12, $$rl_acquire('acquire:e', 'GCRA', 2, '10 s')$$),
	(13, $$rl_acquire('acquire:e', 'gcra', 0, '10 s')$$),
	(14, $$rl_acquire('acquire:e', 'gcra', 2, '0.5 ms')$$),
	(15, $$rl_acquire('acquire:e', 'gcra', 2, '10 s', -1)$$)
) c(n, e) ORDER BY n;
-- Accepted at the edge: max_wait 1 hour.
SELECT try($$rl_acquire('acquire:z', 'gcra', 2, '10 s', max_wait => '1 hour')$$);
SELECT calls - :calls0 AS round_trips FROM rl_status();

SELECT count(rl_reset('acquire:' || k, a, l, w::interval)) AS cleaned
FROM (VALUES ('t', 'token_bucket', 1, '10 s'), ('g', 'gcra', 2, '10 s'),
			 ('f', 'fixed_window', 2, '1 minute'), ('s', 'sliding_log', 2, '10 s'),
			 ('z', 'gcra', 2, '10 s'), ('e', 'gcra', 2, '10 s')) v(k, a, l, w);
DROP FUNCTION try(text);
