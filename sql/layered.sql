--
-- rl_allow_layered: several rules for one key, consumed all or nothing
--
-- Keys of this suite start with "layered:".  pg_regress creates the
-- database afresh and its OID is part of every Redis key, so no state of
-- an earlier run can leak in.
--
-- The clock is pinned at T0 = 1700000000000 ms (2023-11-14 22:13:20 UTC),
-- 80000 s into its UTC day: a one-day fixed window ends 6400000 ms later.
SET ratelimit.test_clock_ms = 1700000000000;

CREATE FUNCTION layered_error(query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	context text;
BEGIN
	EXECUTE query;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	-- The CONTEXT line that names the rule an error is about.
	GET STACKED DIAGNOSTICS context = PG_EXCEPTION_CONTEXT;
	context := split_part(context, E'\n', 1);
	RETURN SQLSTATE || ': ' || SQLERRM ||
		CASE WHEN context LIKE 'rule %' THEN ' (' || context || ')' ELSE '' END;
END $$;

-- 5 per second AND 100 per minute AND 1000 per day.
CREATE FUNCTION layered_rules() RETURNS rl_rule[]
LANGUAGE sql AS $$
	SELECT ARRAY[('sliding_log', 5, '1 second'),
				 ('sliding_log', 100, '1 minute'),
				 ('fixed_window', 1000, '1 day')]::rl_rule[]
$$;

-- Each rule on its own, looked at without consuming.
CREATE FUNCTION layered_layers(key text)
RETURNS TABLE(rule bigint, algo text, "limit" bigint, allowed boolean,
			  remaining bigint, retry_after_ms bigint, reset_after_ms bigint)
LANGUAGE sql AS $$
	SELECT n, r.algo, r."limit", p.*
	FROM unnest(layered_rules()) WITH ORDINALITY AS r(algo, "limit", "window", n),
		 LATERAL rl_peek_layered(key, ARRAY[(r.algo, r."limit", r."window")]::rl_rule[]) p
	ORDER BY n
$$;

-- calls calls at each of the given seconds after T0 (the clock is moved).
CREATE FUNCTION layered_burst(key text, seconds int[], calls int)
RETURNS TABLE(allowed bigint, denied bigint)
LANGUAGE plpgsql AS $$
DECLARE
	s int;
	ok boolean;
BEGIN
	allowed := 0;
	denied := 0;
	FOREACH s IN ARRAY seconds LOOP
		PERFORM set_config('ratelimit.test_clock_ms', (1700000000000 + s * 1000)::text, false);
		FOR i IN 1 .. calls LOOP
			SELECT r.allowed INTO ok FROM rl_allow_layered(key, layered_rules()) r;
			IF ok THEN allowed := allowed + 1; ELSE denied := denied + 1; END IF;
		END LOOP;
	END LOOP;
	RETURN NEXT;
END $$;

-- Five calls in one second pass; remaining is the smallest (the 1 s
-- rule's), reset_after_ms the largest (the day window's end).
-- (cost 1 + 0 * n makes LATERAL call it once per row.)
SELECT n, r.* FROM generate_series(1, 5) n,
	   LATERAL rl_allow_layered('layered:u1', layered_rules(), 1 + 0 * n) r;
-- The sixth is refused by the 1 s rule: retry when the oldest entry
-- leaves, 1000 ms from now.
SELECT * FROM rl_allow_layered('layered:u1', layered_rules());
-- The refused call took nothing from the other rules: 95 and 995 left.
SELECT * FROM layered_layers('layered:u1');
-- The layered answer, peeked: the state as it is (remaining 0, nothing
-- consumed).
SELECT * FROM rl_peek_layered('layered:u1', layered_rules());

-- Seconds 1 to 19: five calls each pass, 20 x 5 = 100 in the minute.
SELECT * FROM layered_burst('layered:u1', ARRAY(SELECT generate_series(1, 19)), 5);
-- A sixth call in second 19 is refused by two rules: the 1 s rule frees
-- up in 1000 ms, the minute rule in 41000 ms (when T0's entries leave).
-- The answer is the largest wait.
SELECT * FROM rl_allow_layered('layered:u1', layered_rules());
-- Second 20: the 1 s rule would admit, the minute rule refuses.
SET ratelimit.test_clock_ms = 1700000020000;
SELECT * FROM rl_allow_layered('layered:u1', layered_rules());
SELECT * FROM layered_layers('layered:u1');

-- Minutes 1 to 9, five calls in each of seconds 0 to 19: 900 calls, all
-- admitted (each second's calls take the place of those made a minute
-- before), and the day rule reaches its 1000.
SELECT * FROM layered_burst('layered:u1',
	ARRAY(SELECT m * 60 + s FROM generate_series(1, 9) m, generate_series(0, 19) s ORDER BY 1), 5);
-- Minute 10: only the day rule refuses; it resets at UTC midnight,
-- 6400000 - 600000 ms away.
SET ratelimit.test_clock_ms = 1700000600000;
SELECT * FROM rl_allow_layered('layered:u1', layered_rules());
SELECT * FROM layered_layers('layered:u1');

-- cost applies to every rule; cost 0 peeks.
SET ratelimit.test_clock_ms = 1700000000000;
SELECT * FROM rl_allow_layered('layered:u2', layered_rules(), 4);
SELECT * FROM rl_allow_layered('layered:u2', layered_rules(), 2);
SELECT * FROM rl_allow_layered('layered:u2', layered_rules(), 0);
SELECT * FROM layered_layers('layered:u2');

-- Rules of one algorithm with different windows keep separate state, and
-- a rule is the limiter rl_allow and rl_peek of the same parameters use
-- (a limiter is its key, algorithm, limit, window and burst): the 1 s
-- rule holds the 4 units of the first call (the second was denied), so
-- (t,1,0,1000).
SELECT * FROM rl_peek('layered:u2', 'sliding_log', 5, '1 second');

-- Rules of different algorithms; the tightest one speaks.
SELECT * FROM rl_allow_layered('layered:u3',
	ARRAY[('token_bucket', 10, '1 minute'), ('gcra', 2, '1 second')]::rl_rule[], 2);
SELECT * FROM rl_allow_layered('layered:u3',
	ARRAY[('token_bucket', 10, '1 minute'), ('gcra', 2, '1 second')]::rl_rule[], 1);

-- rl_reset_layered forgets every rule's state.
SELECT rl_reset_layered('layered:u1', layered_rules());
SELECT rl_reset_layered('layered:u1', layered_rules());
SELECT * FROM rl_allow_layered('layered:u1', layered_rules());
SELECT has_function_privilege('public', 'rl_reset_layered(text, rl_rule[])', 'EXECUTE')
	AS public_may_reset;

-- Bad input, all checked before Redis is asked.
SELECT layered_error($$SELECT * FROM rl_allow_layered(NULL, layered_rules())$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', NULL::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', NULL::rl_burst_rule[])$$);
-- Untyped, the rules match both rl_rule[] and rl_burst_rule[] (0.3.0).
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', NULL)$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', layered_rules(), NULL)$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', '{}'::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[NULL]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[('gcra', NULL, '1 second')]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[('gcra', 5, NULL)]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[('GCRA', 5, '1 second')]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[('gcra', 0, '1 second')]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[('sliding_log', 100001, '1 second')]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[('gcra', 5, '367 days')]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('', layered_rules())$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', layered_rules(), 6)$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', layered_rules(), -1)$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x',
	ARRAY[('gcra', 5, '1 second'), ('gcra', 50, '1000 ms')]::rl_rule[])$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x',
	ARRAY(SELECT ('gcra', 5, make_interval(secs => s))::rl_rule FROM generate_series(1, 17) s))$$);
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:x', ARRAY[[('gcra', 5, '1 second')::rl_rule]])$$);
-- 16 rules are fine.
SELECT * FROM rl_allow_layered('layered:x',
	ARRAY(SELECT ('gcra', s, make_interval(secs => s))::rl_rule FROM generate_series(1, 16) s));
-- Nothing was charged by the failed calls: only the 16-rule call's unit.
SELECT * FROM rl_peek_layered('layered:x', ARRAY[('gcra', 1, '1 second')]::rl_rule[]);

-- Redis unavailable: the failure policy's answer.
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SELECT * FROM rl_allow_layered('layered:u4', layered_rules());
SET ratelimit.failure_mode = closed;
SELECT allowed, remaining, retry_after_ms > 0 AS retry_later, reset_after_ms
FROM rl_allow_layered('layered:u4', layered_rules());
SET ratelimit.failure_mode = error;
SELECT layered_error($$SELECT * FROM rl_allow_layered('layered:u4', layered_rules())$$);
SELECT layered_error($$SELECT rl_reset_layered('layered:u4', layered_rules())$$);
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
SELECT * FROM rl_peek_layered('layered:u4', layered_rules());

DROP FUNCTION layered_error(text);
DROP FUNCTION layered_layers(text);
DROP FUNCTION layered_burst(text, int[], int);
DROP FUNCTION layered_rules();
