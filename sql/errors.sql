--
-- errors: every bad input is refused with its SQLSTATE before any Redis
-- round trip; odd but valid keys are each their own limiter.
--
-- try(expr) evaluates one expression and returns its value as text, or
-- the SQLSTATE and message of the error it raised, so that a whole table
-- of cases fits in one query.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;

-- Odd but valid keys, used at the end.
CREATE TEMP TABLE odd (n int, key text);
INSERT INTO odd VALUES
	(1, E'a\r\nb'),
	(2, E'*3\r\n$3\r\nDEL'),
	(3, '%s%s%n'),
	(4, '{tag}'),
	(5, 'x:y'),
	(6, '}'),
	(7, '%7D'),
	(8, 'ünï'),
	(9, 'a b'),
	(10, '%'),
	(11, '%25'),
	(12, '{'),
	(13, '}:fixed_window'),
	(14, E'\\'),
	(15, '😀'),
	(16, 'k');

-- Every key lives under this database's OID, new for each pg_regress run,
-- so no state of an earlier run can leak in.

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

-- Connect once (to every master, in cluster mode: 64 keys reach them
-- all), so the counters below only move for round trips.
SELECT count(*) FILTER (WHERE allowed) AS warm
FROM rl_allow_many(ARRAY(SELECT 'errors:warmup' || g FROM generate_series(1, 64) g),
				   'gcra', 5, '10 s', 0);
SELECT calls AS calls0, allowed AS allowed0, denied AS denied0,
	   failures AS failures0, connects AS connects0
FROM rl_status() \gset

-- NULL in any argument: 22004, never a NULL row.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow(NULL, 'gcra', 5, '10 s')$$),
	(2, $$rl_allow('k', NULL, 5, '10 s')$$),
	(3, $$rl_allow('k', 'gcra', NULL, '10 s')$$),
	(4, $$rl_allow('k', 'gcra', 5, NULL)$$),
	(5, $$rl_allow('k', 'gcra', 5, '10 s', NULL)$$),
	(6, $$rl_allow('k', 'gcra', 5, '10 s', cost => NULL)$$),
	(7, $$rl_peek(NULL, 'gcra', 5, '10 s')$$),
	(8, $$rl_peek('k', NULL, 5, '10 s')$$),
	(9, $$rl_peek('k', 'gcra', NULL, '10 s')$$),
	(10, $$rl_peek('k', 'gcra', 5, NULL)$$),
	(11, $$rl_reset(NULL, 'gcra', 5, '10 s')$$),
	(12, $$rl_reset('k', NULL, 5, '10 s')$$),
	(14, $$rl_reset('k', 'gcra', NULL, '10 s')$$),
	(15, $$rl_reset('k', 'gcra', 5, NULL)$$),
	(13, $$rl_allow(NULL, NULL, NULL, NULL, NULL)$$)
) c(n, e) ORDER BY n;

-- Keys: not empty, at most 1024 bytes (bytes, not characters).
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('', 'gcra', 5, '10 s')$$),
	(2, $$rl_peek('', 'gcra', 5, '10 s')$$),
	(3, $$rl_reset('', 'gcra', 5, '10 s')$$),
	(4, $$rl_allow(repeat('k', 1024), 'gcra', 5, '10 s')$$),
	(5, $$rl_allow(repeat('k', 1025), 'gcra', 5, '10 s')$$),
	(6, $$rl_reset(repeat('k', 1025), 'gcra', 5, '10 s')$$),
	(7, $$rl_allow(repeat('ü', 512), 'gcra', 5, '10 s')$$),
	(8, $$rl_allow(repeat('ü', 512) || 'x', 'gcra', 5, '10 s')$$),
	(9, $$rl_allow(repeat('k', 1048576), 'gcra', 5, '10 s')$$)
) c(n, e) ORDER BY n;

-- Limits: 1 .. 1e9, and 1 .. 100000 for sliding_log.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('errors:l', 'fixed_window', 0, '10 s')$$),
	(2, $$rl_allow('errors:l', 'fixed_window', -1, '10 s')$$),
	(3, $$rl_allow('errors:l', 'fixed_window', 1000000001, '10 s')$$),
	(4, $$rl_allow('errors:l', 'gcra', -9223372036854775808, '10 s')$$),
	(5, $$rl_allow('errors:l', 'fixed_window', 1000000000, '10 s')$$),
	(6, $$rl_allow('errors:l', 'sliding_log', 100001, '10 s')$$),
	(7, $$rl_allow('errors:l', 'sliding_log', 100000, '10 s')$$),
	(8, $$rl_allow('errors:l', 'sliding_counter', 1000000001, '10 s')$$),
	(9, $$rl_peek('errors:l', 'token_bucket', 0, '10 s')$$)
) c(n, e) ORDER BY n;

-- Windows: 1 ms .. 366 days; a month counts as 30 days.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('errors:w', 'sliding_log', 5, '0')$$),
	(2, $$rl_allow('errors:w', 'sliding_log', 5, '0.5 ms')$$),
	(3, $$rl_allow('errors:w', 'sliding_log', 5, '999 microseconds')$$),
	(4, $$rl_allow('errors:w', 'sliding_log', 5, '-10 s')$$),
	(5, $$rl_allow('errors:w', 'sliding_log', 5, '1 day -24 hours')$$),
	(6, $$rl_allow('errors:w', 'sliding_log', 5, '367 days')$$),
	(7, $$rl_allow('errors:w', 'sliding_log', 5, '366 days 1 microsecond')$$),
	(8, $$rl_allow('errors:w', 'sliding_log', 5, '13 mons')$$),
	(9, $$rl_allow('errors:w', 'sliding_log', 5, '1 year 1 mon')$$),
	(10, $$rl_allow('errors:w', 'sliding_log', 5, '178000000 years')$$),
	(11, $$rl_allow('errors:w', 'sliding_log', 5, '-178000000 years')$$)
) c(n, e) ORDER BY n;
-- Accepted: sliding_log's reset_after is the window.  1 ms; 366 days =
-- 31622400000 ms; '1 mon' = 30 days = 2592000000 ms; '12 mons' = 360 days
-- = 31104000000 ms; '1 day -1 hour' = 23 h = 82800000 ms.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('errors:w1', 'sliding_log', 5, '1 ms')$$),
	(2, $$rl_allow('errors:w2', 'sliding_log', 5, '366 days')$$),
	(3, $$rl_allow('errors:w3', 'sliding_log', 5, '1 mon')$$),
	(4, $$rl_allow('errors:w4', 'sliding_log', 5, '12 mons')$$),
	(5, $$rl_allow('errors:w5', 'sliding_log', 5, '1 day -1 hour')$$)
) c(n, e) ORDER BY n;

-- Algorithms: exact spelling only; the hint lists the valid names.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('errors:a', 'FIXED', 5, '10 s')$$),
	(2, $$rl_allow('errors:a', 'fixed_window ', 5, '10 s')$$),
	(3, $$rl_allow('errors:a', 'Fixed_Window', 5, '10 s')$$),
	(4, $$rl_allow('errors:a', '', 5, '10 s')$$),
	(5, $$rl_peek('errors:a', 'fixed', 5, '10 s')$$),
	(6, $$rl_reset('errors:a', 'leaky', 5, '10 s')$$)
) c(n, e) ORDER BY n;
\set VERBOSITY default
SELECT * FROM rl_allow('errors:a', 'fixed ', 5, '10 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_allow(repeat('k', 1025), 'gcra', 5, '10 s');
\echo :LAST_ERROR_SQLSTATE
SELECT * FROM rl_allow('errors:c', 'gcra', 5, '10 s', 6);
\echo :LAST_ERROR_SQLSTATE

-- Costs: 0 .. limit.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow('errors:c', 'gcra', 5, '10 s', -1)$$),
	(2, $$rl_allow('errors:c', 'gcra', 5, '10 s', 6)$$),
	(3, $$rl_allow('errors:c', 'sliding_log', 1, '10 s', 2)$$),
	(4, $$rl_allow('errors:c', 'token_bucket', 5, '10 s', 9223372036854775807)$$),
	(5, $$rl_allow('errors:c', 'gcra', 5, '10 s', 5)$$),
	(6, $$rl_allow('errors:c', 'gcra', 5, '10 s', 0)$$)
) c(n, e) ORDER BY n;

-- None of the refused calls above reached Redis.  Counted are only the
-- 11 accepted ones: the two 1024-byte keys, limit cases 5 and 7, the five
-- windows, cost cases 5 and 6; all allowed; no reconnect, no failure.
SELECT calls - :calls0 AS calls, allowed - :allowed0 AS allowed,
	   denied - :denied0 AS denied, connects - :connects0 AS connects,
	   failures - :failures0 AS failures
FROM rl_status();

-- The same, with Redis out of reach: a bad argument is still reported as
-- such (22004, 22023), not as 08006, so it was checked first.
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.failure_mode = error;
SET client_min_messages = error;
SELECT n, try(e) FROM (VALUES
	(1, $$rl_reset(NULL, 'gcra', 5, '10 s')$$),
	(2, $$rl_reset('', 'gcra', 5, '10 s')$$),
	(3, $$rl_reset('k', 'GCRA', 5, '10 s')$$),
	(6, $$rl_reset('k', 'gcra', 0, '10 s')$$),
	(7, $$rl_reset('k', 'gcra', 5, '0')$$),
	(8, $$rl_reset('k', 'gcra', 5, '10 s', 0)$$),
	(4, $$rl_allow('k', 'gcra', 0, '10 s')$$),
	(5, $$rl_peek('k', 'gcra', 5, '0')$$)
) c(n, e) ORDER BY n;
SELECT failures - :failures0 AS failures FROM rl_status();
-- A valid call does try, and fails: 08006.
SELECT left(try($$rl_reset('k', 'gcra', 5, '10 s')$$), 5) AS sqlstate;
SELECT left(try($$rl_allow('k', 'gcra', 5, '10 s')$$), 5) AS sqlstate;
SELECT failures - :failures0 > 0 AS failed FROM rl_status();
RESET client_min_messages;
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;

-- Odd keys (table odd, above) are valid, and each is its own limiter: key
-- n takes n units of a 100-unit fixed_window, then a peek of each shows
-- 100 - n left.  The escaping keeps "}" and "%7D", "%" and "%25" apart.
SELECT n, (rl_allow(key, 'fixed_window', 100, '10 s', n)).allowed
FROM odd ORDER BY n;
SELECT n, octet_length(key) AS bytes, r.remaining, r.remaining = 100 - n AS own
FROM odd, LATERAL rl_peek(key, 'fixed_window', 100, '10 s') r ORDER BY n;
SELECT count(*) FILTER (WHERE rl_reset(key, 'fixed_window', 100, '10 s')) AS reset FROM odd;
DROP TABLE odd;
DROP FUNCTION try(text);
