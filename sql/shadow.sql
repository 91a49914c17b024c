--
-- Shadow mode: ratelimit.enforce = off runs and counts every check as
-- usual, denials included, and lets every call through.
--
-- The clock is pinned at 1700000000000 ms, 20 s into a minute.
SET ratelimit.test_clock_ms = 1700000000000;

-- Counters of this backend, as differences from a mark.
CREATE TABLE shadow_mark AS SELECT calls, allowed, denied FROM rl_status();
CREATE FUNCTION shadow_counts(OUT calls bigint, OUT allowed bigint, OUT denied bigint)
LANGUAGE sql AS $$
	SELECT s.calls - m.calls, s.allowed - m.allowed, s.denied - m.denied
	FROM rl_status() s, shadow_mark m
$$;

-- n calls of a fixed window of limit 2 per minute, one after the other.
CREATE FUNCTION shadow_calls(key text, n int) RETURNS SETOF rl_result
LANGUAGE plpgsql AS $$
BEGIN
	FOR i IN 1..n LOOP
		RETURN QUERY SELECT * FROM rl_allow(key, 'fixed_window', 2, '1 minute');
	END LOOP;
END $$;

SHOW ratelimit.enforce;

-- Enforced: the third call of a limit of 2 is denied.
SELECT * FROM shadow_calls('shadow:a', 3);

-- Shadow mode: the same calls on another key are all let through.  The
-- third reports what Redis said of the key (nothing remaining) but no wait,
-- and is counted as the denial it really was; it consumed nothing.
SET ratelimit.enforce = off;
TRUNCATE shadow_mark;
INSERT INTO shadow_mark SELECT calls, allowed, denied FROM rl_status();
SELECT * FROM shadow_calls('shadow:b', 3);
SELECT * FROM shadow_counts();
SELECT * FROM rl_peek('shadow:b', 'fixed_window', 2, '1 minute');

-- Every algorithm, with a cost above what is left.
SELECT a, (rl_allow('shadow:c:' || a, a, 3, '1 minute', 2)).allowed AS first,
	(rl_allow('shadow:c:' || a, a, 3, '1 minute', 2)).allowed AS second,
	(rl_peek('shadow:c:' || a, a, 3, '1 minute')).remaining AS remaining
FROM unnest(ARRAY['fixed_window', 'sliding_log', 'sliding_counter',
				  'token_bucket', 'leaky_bucket', 'gcra']) a;

-- Batches and layered rules.
SELECT key, allowed, remaining, retry_after_ms
FROM rl_allow_many(ARRAY['shadow:d', 'shadow:d', 'shadow:d'], 'gcra', 2, '1 minute');
SELECT * FROM rl_allow_layered('shadow:e',
	ARRAY[('gcra', 1, '1 minute'), ('fixed_window', 5, '1 hour')]::rl_rule[]);
SELECT * FROM rl_allow_layered('shadow:e',
	ARRAY[('gcra', 1, '1 minute'), ('fixed_window', 5, '1 hour')]::rl_rule[]);

-- A key denied while enforced is let through once enforcement is off.
-- (With the clock pinned the deny cache is not used; its answers go
-- through the same last step as Redis's.)
SET ratelimit.enforce = on;
SELECT allowed FROM rl_allow('shadow:f', 'fixed_window', 1, '1 minute');
SELECT allowed FROM rl_allow('shadow:f', 'fixed_window', 1, '1 minute');
SET ratelimit.enforce = off;
SELECT allowed, retry_after_ms FROM rl_allow('shadow:f', 'fixed_window', 1, '1 minute');

-- Triggers: rows over the limit are written, and the limiter still counts
-- the ones it admitted.  Three rows of one key under a statement limit of
-- 2 can never pass: enforced, that fails before Redis is asked; in shadow
-- mode it is counted as a denial and charges nothing.
CREATE TABLE shadow_rows (k int);
CREATE TRIGGER shadow_rows_t BEFORE INSERT ON shadow_rows
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('k', 'fixed_window', '1', '1 minute');
CREATE TABLE shadow_bulk (k int);
CREATE TRIGGER shadow_bulk_t AFTER INSERT ON shadow_bulk REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('k', 'fixed_window', '2', '1 minute');
INSERT INTO shadow_rows VALUES (1), (1), (1);
INSERT INTO shadow_bulk VALUES (1), (1), (1);
SELECT count(*) FROM shadow_rows;
SELECT count(*) FROM shadow_bulk;
SELECT remaining FROM rl_peek_layered('public.shadow_rows:k=''1''',
	ARRAY[('fixed_window', 1, '1 minute')]::rl_rule[]);
SELECT remaining FROM rl_peek_layered('public.shadow_bulk:k=''1''',
	ARRAY[('fixed_window', 2, '1 minute')]::rl_rule[]);
-- Enforced again, the same statements are refused: the row limiter is
-- spent, and three rows of one key exceed the statement limiter's 2.
SET ratelimit.enforce = on;
INSERT INTO shadow_rows VALUES (1);
INSERT INTO shadow_bulk VALUES (1), (1), (1);

-- The PostgREST guard: no 429 in shadow mode.
SET ratelimit.enforce = off;
SELECT rl_postgrest_guard('fixed_window', 1, '1 minute', 'shadow:g');
SELECT rl_postgrest_guard('fixed_window', 1, '1 minute', 'shadow:g');
SET ratelimit.enforce = on;
SELECT rl_postgrest_guard('fixed_window', 1, '1 minute', 'shadow:g');

-- Per transaction: SET LOCAL ends with the transaction.
BEGIN;
SET LOCAL ratelimit.enforce = off;
SELECT allowed FROM rl_allow('shadow:a', 'fixed_window', 2, '1 minute');
COMMIT;
SELECT allowed FROM rl_allow('shadow:a', 'fixed_window', 2, '1 minute');

-- With failure_mode closed and Redis unreachable, shadow mode lets the
-- call through as well; the answer is the policy's (remaining unknown).
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.failure_mode = closed;
SET ratelimit.enforce = off;
SELECT * FROM rl_allow('shadow:h', 'fixed_window', 1, '1 minute');
RESET ratelimit.enforce;
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;

-- Only a superuser may switch enforcement, or set it for a role.
CREATE ROLE regress_rl_shadow;
SET ROLE regress_rl_shadow;
SET ratelimit.enforce = off;
RESET ROLE;
ALTER ROLE regress_rl_shadow SET ratelimit.enforce = off;
SELECT setconfig FROM pg_db_role_setting
WHERE setrole = 'regress_rl_shadow'::regrole;
DROP ROLE regress_rl_shadow;

DROP TABLE shadow_rows, shadow_bulk, shadow_mark;
DROP FUNCTION shadow_counts(), shadow_calls(text, int);
