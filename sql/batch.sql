--
-- rl_allow_many: many keys against one limiter, in one round trip
--
-- Keys of this suite start with "batch:".  pg_regress creates the
-- database afresh and its OID is part of every Redis key, so no state of
-- an earlier run can leak in.
--
-- The clock is pinned: 1700000000000 ms is 20 s into a minute, so a
-- one-minute fixed window ends 40000 ms later.
SET ratelimit.test_clock_ms = 1700000000000;

-- Errors as "SQLSTATE: message", so each test shows its code.
CREATE FUNCTION batch_error(query text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	context text;
BEGIN
	EXECUTE query;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	-- The CONTEXT line that names the element an error is about.
	GET STACKED DIAGNOSTICS context = PG_EXCEPTION_CONTEXT;
	context := split_part(context, E'\n', 1);
	RETURN SQLSTATE || ': ' || SQLERRM ||
		CASE WHEN context LIKE 'element %' THEN ' (' || context || ')' ELSE '' END;
END $$;

-- One row per key, in array order.  A key listed twice is checked twice,
-- in order: the third 'batch:a' finds the first two consumed.
SELECT * FROM rl_allow_many(ARRAY['batch:a', 'batch:b', 'batch:a', 'batch:c', 'batch:a'],
							'fixed_window', 2, '1 minute');

-- The state left behind is that of five rl_allow calls.
SELECT * FROM rl_peek('batch:a', 'fixed_window', 2, '1 minute');
SELECT * FROM rl_peek('batch:b', 'fixed_window', 2, '1 minute');

-- One cost per key.  batch:x takes 2, then 3 (the limit is reached), then
-- 1 is refused: the oldest unit leaves the 10 s log 10000 ms from now.
SELECT * FROM rl_allow_many(ARRAY['batch:x', 'batch:y', 'batch:x', 'batch:x'],
							'sliding_log', 5, '10 seconds', ARRAY[2, 5, 3, 1]);

-- A batch answers exactly as the same rl_allow calls made one by one:
-- 20 checks over 5 keys, GCRA with a burst of 3, compared row by row.
CREATE TABLE batch_one_by_one AS
	SELECT i, r.*
	FROM generate_series(1, 20) i,
		 LATERAL rl_allow('batch:single' || (i * 7 % 5), 'gcra', 3, '1 second') r;
CREATE TABLE batch_batched AS
	SELECT i, b.allowed, b.remaining, b.retry_after_ms, b.reset_after_ms
	FROM rl_allow_many(ARRAY(SELECT 'batch:many' || (i * 7 % 5)
							 FROM generate_series(1, 20) i ORDER BY i),
					   'gcra', 3, '1 second') WITH ORDINALITY
		 AS b(key, allowed, remaining, retry_after_ms, reset_after_ms, i);
SELECT * FROM batch_batched ORDER BY i;
SELECT count(*) AS rows,
	   count(*) FILTER (WHERE (o.allowed, o.remaining, o.retry_after_ms, o.reset_after_ms)
						IS DISTINCT FROM
						(b.allowed, b.remaining, b.retry_after_ms, b.reset_after_ms))
	   AS differing
FROM batch_one_by_one o JOIN batch_batched b USING (i);

-- 1000 keys in one call: every key answered, in order, and counted once.
SELECT calls AS calls_before FROM rl_status() \gset
SELECT count(*) AS keys,
	   count(*) FILTER (WHERE allowed) AS allowed,
	   sum(remaining) AS remaining,
	   bool_and(key = 'batch:k' || n) AS in_order
FROM rl_allow_many(ARRAY(SELECT 'batch:k' || g FROM generate_series(1, 1000) g ORDER BY g),
				   'token_bucket', 10, '1 hour', 3) WITH ORDINALITY
	 AS t(key, allowed, remaining, retry_after_ms, reset_after_ms, n);
SELECT calls - :calls_before AS checks FROM rl_status();
-- ... and the same 1000 keys again, now with 7 tokens left: 4 more fit, 8 not.
SELECT allowed, remaining, retry_after_ms, count(*)
FROM rl_allow_many(ARRAY(SELECT 'batch:k' || g FROM generate_series(1, 1000) g),
				   'token_bucket', 10, '1 hour', ARRAY(SELECT 4 + 4 * (g % 2) FROM generate_series(1, 1000) g))
GROUP BY 1, 2, 3 ORDER BY 1, 2, 3;

-- More than 250 keys go in round trips of 250 each, still in order:
-- 2500 checks of 3 keys, each key's remaining counting down across them.
SELECT count(*) AS checks, bool_and(allowed) AS all_allowed,
	   bool_and(remaining = 1000 - occurrence) AS counted_in_order
FROM (SELECT t.*, row_number() OVER (PARTITION BY key ORDER BY n) AS occurrence
	  FROM rl_allow_many(ARRAY(SELECT 'batch:chunk' || g % 3 FROM generate_series(1, 2500) g ORDER BY g),
						 'fixed_window', 1000, '1 minute') WITH ORDINALITY
		   AS t(key, allowed, remaining, retry_after_ms, reset_after_ms, n)) s;
SELECT * FROM rl_peek('batch:chunk0', 'fixed_window', 1000, '1 minute');

-- An empty array gives no rows and no Redis call.
SELECT count(*) FROM rl_allow_many('{}', 'gcra', 1, '1 second');

-- Bad input: everything is checked before anything is sent.
SELECT batch_error($$SELECT * FROM rl_allow_many(NULL, 'gcra', 1, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n', NULL], 'gcra', 1, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], NULL, 1, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], 'gcra', 1, '1 second', NULL::bigint)$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], 'gcra', 1, '1 second', NULL::bigint[])$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n', 'batch:m'], 'gcra', 1, '1 second', ARRAY[1, NULL])$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n', 'batch:m'], 'gcra', 1, '1 second', ARRAY[1])$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY[['batch:n'], ['batch:m']], 'gcra', 1, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], 'GCRA', 1, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], 'gcra', 0, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], 'gcra', 1, '0 seconds')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n'], 'gcra', 5, '1 second', 6)$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n', 'batch:m'], 'gcra', 5, '1 second', ARRAY[1, -1])$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY(SELECT 'batch:big' || g FROM generate_series(1, 100001) g), 'gcra', 5, '1 second')$$);
-- A bad key late in the array: the good key before it was not checked.
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n', ''], 'gcra', 1, '1 second')$$);
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:n', repeat('x', 1025)], 'gcra', 1, '1 second')$$);
SELECT * FROM rl_peek('batch:n', 'gcra', 1, '1 second');

-- Redis unavailable: every row is the failure policy's answer.
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SELECT * FROM rl_allow_many(ARRAY['batch:p', 'batch:q'], 'gcra', 1, '1 second');
SET ratelimit.failure_mode = closed;
SELECT key, allowed, remaining, retry_after_ms > 0 AS retry_later, reset_after_ms
FROM rl_allow_many(ARRAY['batch:p', 'batch:q'], 'gcra', 1, '1 second');
SET ratelimit.failure_mode = error;
SELECT batch_error($$SELECT * FROM rl_allow_many(ARRAY['batch:p'], 'gcra', 1, '1 second')$$);
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
-- Back on Redis: batch:p was never charged.
SELECT * FROM rl_allow_many(ARRAY['batch:p'], 'gcra', 1, '1 second');

DROP TABLE batch_one_by_one, batch_batched;
DROP FUNCTION batch_error(text);
