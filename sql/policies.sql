--
-- policies: named policies (issue 24), the rl_policies table and the
-- calls by name.
--
LOAD 'ratelimit';
SET ratelimit.test_clock_ms = 1800000000000;

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

-- A statement, run for its SQLSTATE and message (or "ok").
CREATE FUNCTION run(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	msg text;
BEGIN
	EXECUTE stmt;
	RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN state || ': ' || msg;
END
$$;

-- The table: a row is checked as a call's arguments are, with their
-- SQLSTATEs, and nothing is written.
INSERT INTO rl_policies (name, algo, "limit", "window", description)
VALUES ('pol.free', 'gcra', 3, '10 seconds', 'free plan');
SELECT n, run(s) FROM (VALUES
	(1, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcrb', 3, '10 s')$$),
	(2, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcra', 0, '10 s')$$),
	(3, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcra', 3, '0 s')$$),
	(4, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcra', 3, '400 days')$$),
	(5, $$INSERT INTO rl_policies (name, algo, "limit", "window", burst) VALUES ('bad', 'gcra', 3, '10 s', 0)$$),
	(6, $$INSERT INTO rl_policies (name, algo, "limit", "window", burst) VALUES ('bad', 'fixed_window', 3, '10 s', 5)$$),
	(7, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'sliding_log', 100001, '10 s')$$),
	(8, $$INSERT INTO rl_policies (name, algo, "limit", "window", failure_mode) VALUES ('bad', 'gcra', 3, '10 s', 'opened')$$),
	(9, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad name', 'gcra', 3, '10 s')$$),
	(10, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('', 'gcra', 3, '10 s')$$),
	(11, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES (repeat('x', 64), 'gcra', 3, '10 s')$$),
	(12, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('a/b', 'gcra', 3, '10 s')$$),
	(13, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', NULL, 3, '10 s')$$),
	(14, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcra', NULL, '10 s')$$),
	(15, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcra', 3, NULL)$$),
	(16, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES (NULL, 'gcra', 3, '10 s')$$),
	(17, $$INSERT INTO rl_policies (name, algo, "limit", "window", enforce) VALUES ('bad', 'gcra', 3, '10 s', NULL)$$),
	(18, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('pol.free', 'gcra', 3, '10 s')$$),
	(19, $$UPDATE rl_policies SET "limit" = -1 WHERE name = 'pol.free'$$),
	(20, $$UPDATE rl_policies SET algo = 'token_bucket', burst = 2000000000 WHERE name = 'pol.free'$$),
	(21, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('bad', 'gcra', 999999937, '366 days')$$)
) c(n, s) ORDER BY n;
SELECT name, algo, "limit", "window", burst, enforce, failure_mode, description
FROM rl_policies ORDER BY name;
-- Valid names: letters, digits and _.:- up to 63 bytes.
INSERT INTO rl_policies (name, algo, "limit", "window") VALUES
	(repeat('x', 63), 'fixed_window', 1, '1 s'),
	('A-z_0.9:x', 'fixed_window', 1, '1 s');
DELETE FROM rl_policies WHERE name <> 'pol.free';

-- By name: what the parameter forms return, on a limiter of its own.
SELECT * FROM rl_allow('pol:k1', 'pol.free');
SELECT * FROM rl_allow('pol:k1', 'pol.free', 2);
SELECT * FROM rl_allow('pol:k1', 'pol.free');
SELECT * FROM rl_peek('pol:k1', 'pol.free');
-- The parameter form with the policy's parameters is another limiter.
SELECT * FROM rl_allow('pol:k1', 'gcra', 3, '10 seconds');
SELECT rl_reset('pol:k1', 'pol.free') AS reset, rl_reset('pol:k1', 'pol.free') AS again;
SELECT * FROM rl_peek('pol:k1', 'pol.free');
SELECT * FROM rl_reset('pol:k1', 'gcra', 3, '10 seconds');

-- NULLs (22004) and unknown policies (RL404), in every form.
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow(NULL, 'pol.free')$$),
	(2, $$rl_allow('k', NULL)$$),
	(3, $$rl_allow('k', 'pol.free', NULL)$$),
	(4, $$rl_peek(NULL, 'pol.free')$$),
	(5, $$rl_peek('k', NULL)$$),
	(6, $$rl_reset(NULL, 'pol.free')$$),
	(7, $$rl_reset('k', NULL)$$),
	(8, $$rl_allow('k', 'pol.none')$$),
	(9, $$rl_peek('k', 'pol.none')$$),
	(10, $$rl_reset('k', 'pol.none')$$),
	(11, $$rl_allow('k', 'bad name')$$),
	(12, $$rl_allow('k', repeat('y', 300))$$),
	(13, $$rl_allow('k', 'pol.free', 4)$$),
	(14, $$rl_allow('k', 'pol.free', -1)$$),
	(15, $$rl_allow('', 'pol.free')$$),
	(16, $$rl_allow(NULL, NULL, NULL)$$),
	(17, $$rl_allow('k', 'POL.FREE')$$)
) c(n, e) ORDER BY n;

-- The cache follows the table within a session: an UPDATE is seen by the
-- next call (on a fresh key, so that only the limit shows).
SELECT (rl_allow('pol:k2', 'pol.free')).allowed FROM generate_series(1, 4);
UPDATE rl_policies SET "limit" = 5 WHERE name = 'pol.free';
SELECT * FROM rl_allow('pol:k3', 'pol.free');
DELETE FROM rl_policies WHERE name = 'pol.free';
SELECT try($$rl_allow('pol:k3', 'pol.free')$$);
INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('pol.free', 'fixed_window', 2, '10 s');
SELECT * FROM rl_allow('pol:k4', 'pol.free');
-- A change is seen inside its transaction, and a rolled-back one not after.
BEGIN;
UPDATE rl_policies SET "limit" = 100 WHERE name = 'pol.free';
SELECT (rl_peek('pol:k5', 'pol.free')).remaining AS inside;
ROLLBACK;
SELECT (rl_peek('pol:k5', 'pol.free')).remaining AS after_rollback;
TRUNCATE rl_policies;
SELECT try($$rl_peek('pol:k5', 'pol.free')$$);
