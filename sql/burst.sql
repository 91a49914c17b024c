--
-- burst: a capacity apart from the rate for token_bucket, leaky_bucket
-- and gcra (issue 14), against numbers worked out by hand from the
-- definitions (lua/*.lua).  Each comment gives the expected rows as
-- (allowed,remaining,retry_after_ms,reset_after_ms).
--
-- Rate limit L = 2 per window W = 10 s, so one unit every 5 s; burst
-- B = 5.  Each algorithm admits 5 calls at once, then one every 5 s:
--   token bucket  starts full with B tokens, refills 1 per 5 s;
--   leaky bucket  starts empty, holds B units, drains 1 per 5 s;
--   gcra          T = 5 s, tolerance B x T = 25 s.
-- After k calls at one instant remaining is B - k and reset_after is
-- k x 5000 (the time until the state is fresh again); the 6th call is
-- denied with retry_after 5000.
--
-- The clock is pinned: T0 = 1800000000000 ms.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;
-- Every key lives under this database's OID, new for each pg_regress run,
-- so no state of an earlier run can leak in; each has a window of 10 s.

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

-- n calls in a row, one after the other (a LATERAL call that does not
-- use the row would be made once and repeated).
CREATE FUNCTION calls(key text, algo text, "limit" bigint, "window" interval,
					  times int, cost bigint, burst bigint)
RETURNS TABLE(n int, allowed boolean, remaining bigint, retry_after_ms bigint,
			  reset_after_ms bigint)
LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1 .. times LOOP
		n := i;
		SELECT * INTO allowed, remaining, retry_after_ms, reset_after_ms
		FROM rl_allow(key, algo, "limit", "window", cost, burst => calls.burst);
		RETURN NEXT;
	END LOOP;
END
$$;

-- The parameter, by name: rl_allow(key, algo, limit, window, burst => 5).
SELECT pg_get_function_arguments('rl_allow(text,text,bigint,interval,bigint,bigint)'::regprocedure) AS rl_allow;
SELECT pg_get_function_arguments('rl_peek(text,text,bigint,interval,bigint)'::regprocedure) AS rl_peek;
SELECT pg_get_function_arguments('rl_postgrest_guard(text,bigint,interval,text,bigint)'::regprocedure) AS guard;
SELECT p.oid::regprocedure AS rl_allow_many
FROM pg_proc p WHERE proname = 'rl_allow_many' ORDER BY 1::text;
SELECT attrelid::regclass, attname, format_type(atttypid, atttypmod)
FROM pg_attribute
WHERE attrelid IN ('rl_rule'::regclass, 'rl_burst_rule'::regclass) AND attnum > 0
ORDER BY attrelid::regclass::text, attnum;

------------------------------------------------------------------------
-- Six calls at T0, then at T0+5 s, T0+7.5 s, and a peek at T0+30 s.
-- Expected per algorithm: (t,4,0,5000) (t,3,0,10000) (t,2,0,15000)
-- (t,1,0,20000) (t,0,0,25000) (f,0,5000,25000), by name once more
-- (f,0,5000,25000); at +5 s (t,0,0,25000);
-- at +7.5 s (f,0,2500,22500); the peek at +30 s (t,5,0,0).
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT a, r.*
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL calls('burst:s', a, 2, '10 s', 6, 1, 5) r
ORDER BY a, n;
-- The same call by name: rl_allow(key, algo, limit, window, burst => 5).
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_allow('burst:s', a, 2, '10 s', burst => 5) r ORDER BY a;
SET ratelimit.test_clock_ms = 1800000005000;
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_allow('burst:s', a, 2, '10 s', 1, 5) r ORDER BY a;
SET ratelimit.test_clock_ms = 1800000007500;
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_allow('burst:s', a, 2, '10 s', burst => 5) r ORDER BY a;
SET ratelimit.test_clock_ms = 1800000030000;
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_peek('burst:s', a, 2, '10 s', burst => 5) r ORDER BY a;

------------------------------------------------------------------------
-- Without a burst the capacity is the limit, as before: two calls at
-- once, (t,1,0,5000) (t,0,0,10000) (f,0,5000,10000).  burst => NULL and
-- burst => 2 (= limit) give the same answers.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT a, r.*
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL calls('burst:n', a, 2, '10 s', 3, 1, NULL) r
ORDER BY a, n;
SELECT a, r.*
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL calls('burst:eq', a, 2, '10 s', 3, 1, 2) r
ORDER BY a, n;
-- A burst equal to the limit is the capacity no burst gives, so it is the
-- same limiter: read without a burst, both units are spent (0 left).
SELECT a, (rl_peek('burst:eq', a, 2, '10 s')).remaining
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a ORDER BY a;
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_peek('burst:p', a, 2, '10 s', NULL) r ORDER BY a;

------------------------------------------------------------------------
-- Cost above the limit but within the burst: cost 4 of B = 5 at T0 is
-- (t,1,0,20000); a second cost 4 is (f,1,15000,20000): 3 more units take
-- 3 x 5 s.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT a, r.*
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL calls('burst:c', a, 2, '10 s', 2, 4, 5) r
ORDER BY a, n;

------------------------------------------------------------------------
-- A burst below the limit: L = 5 per 10 s (one unit every 2 s), B = 1.
-- At T0: (t,0,0,2000) then (f,0,2000,2000); at T0+1 s (f,0,1000,1000);
-- at T0+2 s (t,0,0,2000).
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT a, r.*
FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL calls('burst:low', a, 5, '10 s', 2, 1, 1) r
ORDER BY a, n;
SET ratelimit.test_clock_ms = 1800000001000;
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_allow('burst:low', a, 5, '10 s', burst => 1) r ORDER BY a;
SET ratelimit.test_clock_ms = 1800000002000;
SELECT a, r.* FROM unnest(ARRAY['token_bucket', 'leaky_bucket', 'gcra']) a,
	 LATERAL rl_allow('burst:low', a, 5, '10 s', burst => 1) r ORDER BY a;

------------------------------------------------------------------------
-- rl_allow_many, both forms: three keys, cost 2 each then costs
-- {3,1,2}, B = 5, at T0.  m1: cost 2 (t,3,0,10000), then cost 3
-- (t,0,0,25000); m2: 2 then 1 (t,2,0,15000); m3: 2 then 2 (t,1,0,20000).
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT * FROM rl_allow_many(ARRAY['burst:m1', 'burst:m2', 'burst:m3'],
							'token_bucket', 2, '10 s', 2, burst => 5);
SELECT * FROM rl_allow_many(ARRAY['burst:m1', 'burst:m2', 'burst:m3'],
							'token_bucket', 2, '10 s', ARRAY[3, 1, 2]::bigint[],
							burst => 5);
-- The same keys again, cost 1: m1 is empty (f,0,5000,25000).
SELECT * FROM rl_allow_many(ARRAY['burst:m1', 'burst:m2', 'burst:m3'],
							'token_bucket', 2, '10 s', burst => 5);

------------------------------------------------------------------------
-- Layered: rules of type rl_burst_rule (algo, limit, window, burst).  A
-- gcra rule of 2 per 10 s with burst 5 under a fixed window of 4 per
-- minute: the fixed window is the tightest after 4 calls.  Calls 1..5
-- at T0: (t,3,0,60000) (t,2,0,60000) (t,1,0,60000) (t,0,0,60000)
-- (f,0,60000,60000); the gcra rule alone then has 1 left (t,1,0,20000).
-- rl_rule keeps its three attributes, so rules written for 0.2.0 still
-- cast.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
SELECT * FROM rl_allow_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5), ('fixed_window', 4, '1 minute', NULL)]::rl_burst_rule[]);
SELECT * FROM rl_allow_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5), ('fixed_window', 4, '1 minute', NULL)]::rl_burst_rule[]);
SELECT * FROM rl_allow_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5), ('fixed_window', 4, '1 minute', NULL)]::rl_burst_rule[]);
SELECT * FROM rl_allow_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5), ('fixed_window', 4, '1 minute', NULL)]::rl_burst_rule[]);
SELECT * FROM rl_allow_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5), ('fixed_window', 4, '1 minute', NULL)]::rl_burst_rule[]);
SELECT * FROM rl_peek_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5)]::rl_burst_rule[]);
-- The same rule without its burst is another limiter (a limiter is its
-- key, algorithm, limit, window and burst): fresh, (t,2,0,0), with
-- rl_rule or with a NULL burst.
SELECT * FROM rl_peek_layered('burst:g', ARRAY[('gcra', 2, '10 s')]::rl_rule[]);
SELECT * FROM rl_peek_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', NULL)]::rl_burst_rule[]);
SELECT try($$rl_peek_layered('burst:g', ARRAY[('gcra', 2, '10 s')]::rl_burst_rule[])$$);
SELECT rl_reset_layered('burst:g',
		ARRAY[('gcra', 2, '10 s', 5), ('fixed_window', 4, '1 minute', NULL)]::rl_burst_rule[]);

------------------------------------------------------------------------
-- Triggers: a last argument 'burst=N'.  3 rows at once with L = 1 per
-- minute and B = 3 pass, the 4th is refused.
------------------------------------------------------------------------
SET ratelimit.test_clock_ms = 1800000000000;
CREATE TABLE burst_posts (author int, body text);
CREATE TRIGGER burst_posts_throttle BEFORE INSERT ON burst_posts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'token_bucket', '1', '1 minute', 'burst=3');
INSERT INTO burst_posts SELECT 1, 'row ' || n FROM generate_series(1, 3) n;
INSERT INTO burst_posts VALUES (1, 'row 4');
\echo :LAST_ERROR_SQLSTATE
INSERT INTO burst_posts VALUES (2, 'other author');
SELECT count(*) FROM burst_posts;
-- With on_deny 'skip' and a cost column before it.
CREATE TABLE burst_events (author int, weight int);
CREATE TRIGGER burst_events_throttle BEFORE INSERT ON burst_events
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'gcra', '1', '1 minute', 'skip', 'weight', 'burst=4');
INSERT INTO burst_events VALUES (1, 3), (1, 1), (1, 1), (1, 4);
SELECT * FROM burst_events;
-- A statement trigger with the same arguments: 5 rows for one key cost 5,
-- more than the burst of 4.
CREATE TABLE burst_batch (author int);
CREATE TRIGGER burst_batch_throttle AFTER INSERT ON burst_batch
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'leaky_bucket', '1', '1 minute', 'burst=4');
INSERT INTO burst_batch SELECT 7 FROM generate_series(1, 4);
INSERT INTO burst_batch SELECT 8 FROM generate_series(1, 5);
\echo :LAST_ERROR_SQLSTATE
SELECT author, count(*) FROM burst_batch GROUP BY author ORDER BY author;
-- Bad trigger arguments.
CREATE TABLE burst_bad (author int, weight int);
CREATE TRIGGER burst_bad_1 BEFORE INSERT ON burst_bad
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'gcra', '1', '1 minute', 'burst=0');
CREATE TRIGGER burst_bad_2 BEFORE INSERT ON burst_bad
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'gcra', '1', '1 minute', 'burst=x');
CREATE TRIGGER burst_bad_3 BEFORE INSERT ON burst_bad
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'fixed_window', '1', '1 minute', 'burst=2');
CREATE TRIGGER burst_bad_4 BEFORE INSERT ON burst_bad
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'gcra', '5', '1 minute', 'raise', 'weight', 'burst=2');
INSERT INTO burst_bad VALUES (1, 3);
DROP TRIGGER burst_bad_4 ON burst_bad;
CREATE TRIGGER burst_bad_5 BEFORE INSERT ON burst_bad
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'gcra', '5', '1 minute', 'raise', 'weight', 'x', 'burst=2');
DROP TABLE burst_bad, burst_posts, burst_events, burst_batch;

------------------------------------------------------------------------
-- PostgREST guard: burst 2 of 1 per minute admits two requests.
------------------------------------------------------------------------
SELECT rl_postgrest_guard('token_bucket', 1, '1 minute', 'burst:guard', 2);
SELECT rl_postgrest_guard('token_bucket', 1, '1 minute', 'burst:guard', burst => 2);
SELECT try($$rl_postgrest_guard('token_bucket', 1, '1 minute', 'burst:guard', 2)$$);
SELECT rl_reset('burst:guard', 'token_bucket', 1, '1 minute', burst => 2);

------------------------------------------------------------------------
-- Every error: SQLSTATE 22023 (22004 for NULL where NULL is no default),
-- and no Redis round trip (the call counter does not move).
------------------------------------------------------------------------
SELECT calls AS calls0 FROM rl_status() \gset
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('burst:e', 'gcra', 2, '10 s', burst => 0)$$),
	(2, $$rl_allow('burst:e', 'gcra', 2, '10 s', burst => -1)$$),
	(3, $$rl_allow('burst:e', 'gcra', 2, '10 s', burst => 1000000001)$$),
	(4, $$rl_allow('burst:e', 'fixed_window', 2, '10 s', burst => 5)$$),
	(5, $$rl_allow('burst:e', 'sliding_log', 2, '10 s', burst => 2)$$),
	(6, $$rl_allow('burst:e', 'sliding_counter', 2, '10 s', burst => 5)$$),
	(7, $$rl_allow('burst:e', 'token_bucket', 2, '10 s', 6, 5)$$),
	(8, $$rl_allow('burst:e', 'leaky_bucket', 5, '10 s', 2, 1)$$),
	(9, $$rl_allow('burst:e', 'gcra', 1, '366 days', burst => 1000)$$),
	(10, $$rl_peek('burst:e', 'gcra', 2, '10 s', 0)$$),
	(11, $$rl_peek('burst:e', 'fixed_window', 2, '10 s', 2)$$),
	(12, $$(SELECT count(*) FROM rl_allow_many(ARRAY['burst:e'], 'gcra', 2, '10 s', burst => 0))$$),
	(13, $$(SELECT count(*) FROM rl_allow_many(ARRAY['burst:e'], 'gcra', 2, '10 s', ARRAY[6]::bigint[], 5))$$),
	(14, $$(SELECT count(*) FROM rl_allow_many(ARRAY['burst:e'], 'sliding_log', 2, '10 s', ARRAY[1]::bigint[], 5))$$),
	(15, $$rl_allow_layered('burst:e', ARRAY[('gcra', 2, '10 s', 0)]::rl_burst_rule[])$$),
	(16, $$rl_allow_layered('burst:e', ARRAY[('fixed_window', 2, '10 s', 3)]::rl_burst_rule[])$$),
	(17, $$rl_allow_layered('burst:e', ARRAY[('gcra', 5, '10 s', 2)]::rl_burst_rule[], 3)$$),
	(18, $$rl_postgrest_guard('gcra', 2, '10 s', 'burst:e', 0)$$),
	(19, $$rl_postgrest_guard('sliding_log', 2, '10 s', 'burst:e', 2)$$),
	(20, $$rl_allow('burst:e', 'gcra', 2, '10 s', NULL, 5)$$)
) c(n, e) ORDER BY n;
-- Accepted at the edge: burst 1000000000, and 100 of 1 per 366 days.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_peek('burst:e', 'token_bucket', 1, '1 s', burst => 1000000000)$$),
	(2, $$rl_peek('burst:e', 'gcra', 1, '366 days', burst => 100)$$)
) c(n, e) ORDER BY n;
SELECT calls - :calls0 AS round_trips FROM rl_status();

DROP FUNCTION try(text);
DROP FUNCTION calls(text, text, bigint, interval, int, bigint, bigint);
