--
-- basic: the API as a user meets it.
--
-- Keys of this suite start with "basic:" or are the README's "user:42".
-- The database is created afresh by pg_regress, and its OID is part of
-- every Redis key, so no state of an earlier run can leak in; the resets
-- below make that explicit.  The clock is pinned to a time that is a whole
-- multiple of every window used here (1800000000000 ms since the epoch).
--
LOAD 'ratelimit';

-- Nothing is opened before the first call.
SELECT connected, server_version IS NULL AS no_version, calls, connects
FROM rl_status();

SET ratelimit.test_clock_ms = 1800000000000;
SELECT count(rl_reset(k, a, l, w::interval)) AS cleaned
FROM (VALUES ('user:42', 'sliding_log', 100, '1 minute'), ('user:42', 'gcra', 100, '1 minute'),
			 ('basic:peek', 'fixed_window', 3, '10 s'), ('basic:reset', 'token_bucket', 2, '10 s'),
			 ('basic:reset', 'leaky_bucket', 2, '1 minute'), ('basic:reset', 'gcra', 2, '1 minute'),
			 ('basic:count', 'fixed_window', 2, '10 s'), ('basic:rows', 'fixed_window', 7, '1 minute'),
			 ('basic:rows2', 'sliding_log', 7, '1 minute')) v(k, a, l, w);

-- The signature and the result type.
SELECT pg_get_function_arguments('rl_allow(text,text,bigint,interval,bigint,bigint)'::regprocedure) AS rl_allow,
	   pg_get_function_arguments('rl_peek(text,text,bigint,interval,bigint)'::regprocedure) AS rl_peek,
	   pg_get_function_arguments('rl_reset(text,text,bigint,interval,bigint)'::regprocedure) AS rl_reset;
SELECT attname, format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid = 'rl_result'::regclass AND attnum > 0
ORDER BY attnum;

-- Every call talks to Redis: volatile, parallel unsafe, and not strict
-- (a NULL argument is an error, never a NULL row that would fail open).
SELECT proname, provolatile, proparallel, proisstrict, prosecdef
FROM pg_proc
WHERE proname IN ('rl_allow', 'rl_peek', 'rl_reset', 'rl_status')
ORDER BY proname;

-- The README's examples.
-- sliding_log, 100 per minute: one unit used, 99 left, the log entry
-- leaves the window in 60000 ms.
SELECT * FROM rl_allow('user:42', 'sliding_log', 100, '1 minute');
-- gcra, 100 per minute (one unit every 600 ms), cost 5: 95 left; fresh
-- again after 5 x 600 = 3000 ms.
SELECT * FROM rl_allow('user:42', 'gcra', 100, interval '1 minute', 5);
-- The same key under two algorithms is two limiters: the sliding log
-- still has 99.
SELECT * FROM rl_peek('user:42', 'sliding_log', 100, '1 minute');

-- rl_peek consumes nothing: three peeks, then one call takes the unit.
-- fixed_window, 3 per 10 s: peek (t,3,0,0) three times, then (t,2,0,10000).
SELECT g, rl_peek('basic:peek', 'fixed_window', 3, '10 s')
FROM generate_series(1, 3) g;
SELECT * FROM rl_allow('basic:peek', 'fixed_window', 3, '10 s');
SELECT * FROM rl_peek('basic:peek', 'fixed_window', 3, '10 s');
-- cost 0 is the same as a peek.
SELECT * FROM rl_allow('basic:peek', 'fixed_window', 3, '10 s', 0);

-- rl_reset: true when there was state, then false; the limiter is fresh.
-- token_bucket 2 per 10 s, cost 2: (t,0,0,10000), then (t,2,0,0).
SELECT * FROM rl_allow('basic:reset', 'token_bucket', 2, '10 s', 2);
SELECT rl_reset('basic:reset', 'token_bucket', 2, '10 s');
SELECT rl_reset('basic:reset', 'token_bucket', 2, '10 s');
SELECT * FROM rl_peek('basic:reset', 'token_bucket', 2, '10 s');
-- Resetting one algorithm, or other parameters, leaves the same key's
-- other limiters alone: a limiter is its key, algorithm, limit, window
-- and burst.  leaky_bucket 2 per minute: (t,1,0,30000) before and after
-- both resets (false: nothing there).
SELECT * FROM rl_allow('basic:reset', 'leaky_bucket', 2, '1 minute');
SELECT rl_reset('basic:reset', 'gcra', 2, '1 minute');
SELECT rl_reset('basic:reset', 'leaky_bucket', 3, '1 minute');
SELECT * FROM rl_peek('basic:reset', 'leaky_bucket', 2, '1 minute');

-- rl_status: connected, a server version, this backend's counters.  The
-- endpoint is the server's host:port, or in cluster mode the seed list
-- and the number of masters; one connection per server at most (the keys
-- above may live on one master or on several).
SELECT CASE current_setting('ratelimit.redis_mode')
		   WHEN 'cluster' THEN endpoint LIKE 'cluster:' ||
			   current_setting('ratelimit.redis_nodes') || ' (% masters)'
		   ELSE endpoint = '127.0.0.1:' || current_setting('ratelimit.redis_port')
	   END AS endpoint_ok,
	   connected, server_version ~ '^(redis|valkey) [0-9]+\.[0-9]+' AS version_ok,
	   last_error, last_error_at, fail_open, fail_closed, failures,
	   connects BETWEEN 1 AND coalesce(substring(endpoint
			   FROM '\(([0-9]+) masters\)$')::int, 1) AS connects_ok
FROM rl_status();
SELECT calls AS calls0, allowed AS allowed0, denied AS denied0,
	   connects AS connects0
FROM rl_status() \gset
-- fixed_window, 2 per 10 s: four calls, two allowed and two denied.
SELECT g, rl_allow('basic:count', 'fixed_window', 2, '10 s')
FROM generate_series(1, 4) g;
SELECT calls - :calls0 AS calls, allowed - :allowed0 AS allowed,
	   denied - :denied0 AS denied, connects - :connects0 AS new_connects,
	   failures
FROM rl_status();

-- A volatile function is evaluated once per row.
SELECT count(*) FILTER (WHERE (rl_allow('basic:rows', 'fixed_window', 7,
										'1 minute')).allowed) AS allowed
FROM generate_series(1, 20);
SELECT count(*) FILTER (WHERE r.allowed) AS allowed,
	   count(*) FILTER (WHERE NOT r.allowed) AS denied,
	   min(r.remaining) AS min_remaining
FROM generate_series(1, 20) g,
	 LATERAL rl_allow('basic:rows2', 'sliding_log', 7, '1 minute', g - g + 1) r;

-- Each check answers within one statement and keeps the connection.
SELECT connected, connects - :connects0 AS new_connects FROM rl_status();
