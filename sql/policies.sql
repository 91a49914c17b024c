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

-- The policies of the rest of this suite.
INSERT INTO rl_policies (name, algo, "limit", "window", burst, enforce, failure_mode) VALUES
	('p.fw', 'fixed_window', 3, '10 seconds', NULL, true, NULL),
	('p.tb', 'token_bucket', 2, '10 seconds', 4, true, NULL),
	('p.gcra', 'gcra', 5, '1 minute', NULL, true, NULL),
	('p.shadow', 'fixed_window', 1, '10 seconds', NULL, false, NULL),
	('p.open', 'fixed_window', 1, '10 seconds', NULL, true, 'open'),
	('p.closed', 'fixed_window', 1, '10 seconds', NULL, true, 'closed'),
	('p.error', 'fixed_window', 1, '10 seconds', NULL, true, 'error'),
	('p.local', 'fixed_window', 1, '10 seconds', NULL, true, 'local');

-- No overload is ambiguous: each form called with literals and NULLs.
SELECT n, left(try(e), 60) AS result FROM (VALUES
	(1, $$rl_allow('amb', 'p.fw')$$),
	(2, $$rl_allow('amb', 'p.fw', 0)$$),
	(3, $$rl_allow(NULL, NULL)$$),
	(4, $$rl_allow(NULL, NULL, NULL)$$),
	(5, $$rl_allow('amb', 'fixed_window', 3, '10 s')$$),
	(6, $$rl_allow(NULL, NULL, NULL, NULL)$$),
	(7, $$rl_peek('amb', 'p.fw')$$),
	(8, $$rl_peek(NULL, NULL)$$),
	(9, $$rl_peek(NULL, NULL, NULL, NULL)$$),
	(10, $$rl_reset(NULL, NULL)$$),
	(11, $$rl_reset(NULL, NULL, NULL, NULL)$$),
	(12, $$(SELECT count(*) FROM rl_allow_many(ARRAY['amb'], 'p.fw'))$$),
	(13, $$(SELECT count(*) FROM rl_allow_many(ARRAY['amb'], 'p.fw', 0))$$),
	(14, $$(SELECT count(*) FROM rl_allow_many(ARRAY['amb'], 'p.fw', ARRAY[0]))$$),
	(15, $$(SELECT count(*) FROM rl_allow_many(NULL, NULL))$$),
	(16, $$(SELECT count(*) FROM rl_allow_many(NULL, NULL, NULL::bigint))$$),
	(17, $$(SELECT count(*) FROM rl_allow_many(NULL, NULL, NULL::bigint[]))$$),
	(18, $$rl_acquire('amb', 'p.fw', '1 s')$$),
	(19, $$rl_acquire('amb', 'p.fw', '1 s', 0)$$),
	(20, $$rl_acquire(NULL, NULL, NULL)$$),
	(21, $$rl_acquire(NULL, NULL, NULL, 1)$$),
	(22, $$rl_acquire(NULL, NULL, NULL::interval, NULL)$$),
	(23, $$rl_acquire('amb', 'fixed_window', 3, '10 s')$$),
	(24, $$rl_acquire(NULL, NULL, NULL::bigint, NULL)$$),
	(25, $$rl_allow_layered('amb', ARRAY['p.fw'])$$),
	(26, $$rl_allow_layered('amb', ARRAY['p.fw'], 0)$$),
	(27, $$rl_allow_layered(NULL, NULL::text[])$$),
	(28, $$rl_peek_layered('amb', ARRAY['p.fw'])$$),
	(29, $$rl_reset_layered(NULL, NULL::text[])$$),
	(30, $$rl_postgrest_guard('p.gcra', 'amb')$$),
	(31, $$rl_postgrest_guard(NULL)$$),
	(32, $$rl_postgrest_guard(NULL, NULL)$$),
	(33, $$rl_postgrest_guard(NULL, NULL, NULL)$$)
) c(n, e) ORDER BY n;
SELECT rl_reset('amb', 'p.fw'), rl_reset('amb', 'p.gcra');

-- rl_allow_many by name: one row per key, one cost or one per key.
SELECT * FROM rl_allow_many(ARRAY['m:a', 'm:b', 'm:a'], 'p.fw');
SELECT * FROM rl_allow_many(ARRAY['m:a', 'm:b'], 'p.fw', 2);
SELECT * FROM rl_allow_many(ARRAY['m:a', 'm:b'], 'p.fw', ARRAY[0, 1]);
SELECT n, try(e) FROM (VALUES
	(1, $$(SELECT count(*) FROM rl_allow_many(NULL, 'p.fw'))$$),
	(2, $$(SELECT count(*) FROM rl_allow_many(ARRAY['m:a'], NULL))$$),
	(3, $$(SELECT count(*) FROM rl_allow_many(ARRAY['m:a'], 'p.fw', NULL::bigint))$$),
	(4, $$(SELECT count(*) FROM rl_allow_many(ARRAY['m:a'], 'p.fw', NULL::bigint[]))$$),
	(5, $$(SELECT count(*) FROM rl_allow_many(ARRAY['m:a'], 'p.none'))$$),
	(6, $$(SELECT count(*) FROM rl_allow_many(ARRAY['m:a'], 'p.fw', ARRAY[1, 2]))$$),
	(7, $$(SELECT count(*) FROM rl_allow_many(ARRAY['m:a'], 'p.fw', 4))$$)
) c(n, e) ORDER BY n;

-- rl_acquire by name: waits (on the pinned clock) for the token bucket
-- to refill, or gives up when the wait does not fit.
SELECT * FROM rl_allow('q:a', 'p.tb', 4);
SELECT * FROM rl_acquire('q:a', 'p.tb', '10 seconds');
SELECT * FROM rl_acquire('q:a', 'p.tb', '1 second', 2);
SELECT * FROM rl_acquire('q:a', 'p.tb', max_wait => '10 seconds', cost => 2);
SELECT n, try(e) FROM (VALUES
	(1, $$rl_acquire(NULL, 'p.tb', '1 s')$$),
	(2, $$rl_acquire('q:a', NULL, '1 s')$$),
	(3, $$rl_acquire('q:a', 'p.tb', NULL)$$),
	(4, $$rl_acquire('q:a', 'p.tb', '1 s'::interval, NULL)$$),
	(5, $$rl_acquire('q:a', 'p.none', '1 s')$$),
	(6, $$rl_acquire('q:a', 'p.tb', '-1 s')$$),
	(7, $$rl_acquire('q:a', 'p.tb', '1 s', 5)$$),
	-- Untyped in both third and fourth place: both forms fit; cast one.
	(8, $$rl_acquire('q:a', 'p.tb', '1 s', NULL)$$)
) c(n, e) ORDER BY n;

-- Layered over policies: all admit, or none is charged; each policy
-- once.  Every policy's store key has the key's hash tag, so the rules
-- stay one check in a Redis Cluster (regress_cluster runs this too).
SELECT * FROM rl_allow_layered('l:a', ARRAY['p.fw', 'p.gcra']);
SELECT * FROM rl_allow_layered('l:a', ARRAY['p.fw', 'p.gcra'], 2);
SELECT * FROM rl_allow_layered('l:a', ARRAY['p.fw', 'p.gcra']);
SELECT * FROM rl_peek('l:a', 'p.gcra');
SELECT * FROM rl_peek_layered('l:a', ARRAY['p.gcra', 'p.fw']);
SELECT rl_reset_layered('l:a', ARRAY['p.fw', 'p.gcra']) AS reset,
	   rl_reset_layered('l:a', ARRAY['p.fw']) AS again;
SELECT * FROM rl_peek_layered('l:a', ARRAY['p.gcra', 'p.fw']);
SELECT n, try(e) FROM (VALUES
	(1, $$rl_allow_layered(NULL, ARRAY['p.fw'])$$),
	(2, $$rl_allow_layered('l:a', NULL::text[])$$),
	(3, $$rl_allow_layered('l:a', ARRAY['p.fw', NULL])$$),
	(4, $$rl_allow_layered('l:a', ARRAY[]::text[])$$),
	(5, $$rl_allow_layered('l:a', ARRAY['p.fw', 'p.fw'])$$),
	(6, $$rl_allow_layered('l:a', ARRAY['p.fw', 'p.none'])$$),
	(7, $$rl_allow_layered('l:a', ARRAY['p.fw'], NULL)$$),
	(8, $$rl_allow_layered('l:a', ARRAY['p.fw'], 4)$$),
	(9, $$rl_peek_layered('l:a', ARRAY['p.none'])$$),
	(10, $$rl_reset_layered('l:a', ARRAY['p.none'])$$),
	(11, $$rl_allow_layered('l:a', (SELECT array_agg('p.fw' || g) FROM generate_series(1, 17) g))$$)
) c(n, e) ORDER BY n;

-- PostgREST by name: the RateLimit fields name the policy.
CREATE FUNCTION pol_guard(key text, OUT state text, OUT message text,
						  OUT detail text, OUT headers text)
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('response.headers', '[]', true);
	PERFORM rl_postgrest_guard('p.fw', key);
	state := '00000';
	headers := current_setting('response.headers');
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL;
END $$;
SELECT * FROM pol_guard('g:a');
SELECT state, headers FROM pol_guard('g:a');
SELECT state, headers FROM pol_guard('g:a');
SELECT state, message::json->>'details' AS details,
	   detail::json->'headers' AS headers
FROM pol_guard('g:a');
SELECT try($$rl_postgrest_guard('p.none', 'g:a')$$);

-- The triggers, by policy: key columns, 'policy=NAME'[, on_deny[, cost]].
CREATE TABLE pol_posts (id serial, author int, weight int);
CREATE TRIGGER pol_posts_throttle BEFORE INSERT ON pol_posts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'policy=p.fw');
INSERT INTO pol_posts (author) VALUES (1), (1);
INSERT INTO pol_posts (author) VALUES (1);
SELECT run($$INSERT INTO pol_posts (author) VALUES (1)$$);
SELECT * FROM rl_peek_layered('public.pol_posts:author=''1''', ARRAY['p.fw']);
DROP TRIGGER pol_posts_throttle ON pol_posts;
CREATE TRIGGER pol_posts_throttle BEFORE INSERT ON pol_posts
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author', 'policy=p.fw', 'skip', 'weight');
INSERT INTO pol_posts (author, weight) VALUES (2, 2), (2, 2), (2, 1);
SELECT author, weight FROM pol_posts WHERE author = 2 ORDER BY id;
DROP TRIGGER pol_posts_throttle ON pol_posts;
CREATE TRIGGER pol_posts_throttle AFTER INSERT ON pol_posts
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author', 'policy=p.fw');
INSERT INTO pol_posts (author) SELECT 3 FROM generate_series(1, 3);
SELECT run($$INSERT INTO pol_posts (author) VALUES (3), (4)$$);
SELECT author, count(*) FROM pol_posts WHERE author IN (3, 4) GROUP BY 1 ORDER BY 1;
SELECT * FROM rl_peek_layered('public.pol_posts:author=''4''', ARRAY['p.fw']);
DROP TRIGGER pol_posts_throttle ON pol_posts;
-- Bad arguments: a policy takes no algo, limit, window or burst; an
-- unknown policy is RL404 at the first row.
CREATE FUNCTION pol_trig(args text) RETURNS text
LANGUAGE plpgsql AS $$
DECLARE
	state text;
	msg text;
BEGIN
	EXECUTE format('CREATE TRIGGER pol_bad BEFORE INSERT ON pol_posts FOR EACH ROW EXECUTE FUNCTION rl_throttle(%s)', args);
	INSERT INTO pol_posts (author, weight) VALUES (9, 1);
	RAISE EXCEPTION USING ERRCODE = 'XX999', MESSAGE = 'inserted';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, msg = MESSAGE_TEXT;
	RETURN state || ': ' || msg;
END $$;
SELECT n, pol_trig(a) FROM (VALUES
	(1, $$'author', 'policy=p.none'$$),
	(2, $$'author', 'policy='$$),
	(3, $$'author', 'policy=p.fw', 'skip', 'weight', 'burst=2'$$),
	(4, $$'author', 'policy=p.fw', 'never'$$),
	(5, $$'author', 'policy=p.fw', 'raise', 'nope'$$),
	(6, $$'author', 'policy=p.fw', 'raise', 'weight'$$)
) c(n, a) ORDER BY n;

-- enforce false: shadow mode for this policy alone.  Its denials are let
-- through and counted as shadow_denied; other policies are enforced.
SELECT rl_stats_reset();
SELECT g, rl_allow('s:a', 'p.shadow') FROM generate_series(1, 3) g;
SELECT (rl_allow('s:a', 'p.fw', 3)).allowed AS fw,
	   (rl_allow('s:a', 'p.fw')).allowed AS fw_denied;
-- In a layered check it is enforced unless every policy is in shadow mode.
SELECT (rl_allow_layered('s:b', ARRAY['p.shadow'])).allowed,
	   (rl_allow_layered('s:b', ARRAY['p.shadow'])).allowed AS shadow_only,
	   (rl_allow_layered('s:b', ARRAY['p.shadow', 'p.gcra'])).allowed AS mixed;
-- The server's setting still applies: ratelimit.enforce off lets all through.
SET ratelimit.enforce = off;
SELECT (rl_allow('s:a', 'p.fw')).allowed AS server_shadow;
RESET ratelimit.enforce;
SELECT policy, calls, allowed, denied, shadow_denied, fail_open, fail_closed,
	   fail_error, fail_local
FROM rl_stats_policies WHERE policy IN ('p.shadow', 'p.fw', 'p.gcra') ORDER BY policy;

-- failure_mode per policy, with Redis out of reach and the server's
-- setting open: each policy answers as its row says.  A layered check
-- counts for each of its policies.
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.failure_mode = open;
SET client_min_messages = error;
SELECT rl_stats_reset();
SELECT * FROM rl_allow('f:a', 'p.fw');
SELECT * FROM rl_allow('f:a', 'p.open');
SELECT allowed, remaining, retry_after_ms > 0 AS waits FROM rl_allow('f:a', 'p.closed');
SELECT left(try($$rl_allow('f:a', 'p.error')$$), 5) AS sqlstate;
SELECT * FROM rl_allow('f:a', 'p.local');
SELECT * FROM rl_allow('f:a', 'p.local');
-- Layered: the strictest of the policies' modes.
SELECT allowed, remaining, retry_after_ms > 0 AS waits
FROM rl_allow_layered('f:b', ARRAY['p.open', 'p.closed']);
SELECT left(try($$rl_allow_layered('f:b', ARRAY['p.closed', 'p.error'])$$), 5) AS sqlstate;
-- Shadow mode and a closed policy: let through.
UPDATE rl_policies SET enforce = false WHERE name = 'p.closed';
SELECT * FROM rl_allow('f:a', 'p.closed');
UPDATE rl_policies SET enforce = true WHERE name = 'p.closed';
SELECT policy, calls, allowed, denied, shadow_denied, fail_open, fail_closed,
	   fail_error, fail_local
FROM rl_stats_policies WHERE policy LIKE 'p.%' AND calls > 0 ORDER BY policy;
RESET client_min_messages;
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;
-- rl_reset of a policy whose failure_mode is local forgets the local
-- store's copy too: with Redis away again, the key starts afresh there.
SELECT rl_reset('f:a', 'p.local') AS in_redis;
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET client_min_messages = error;
SELECT * FROM rl_allow('f:a', 'p.local');
RESET client_min_messages;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;

-- Privileges: a role granted the calls by name spends quota under the
-- policies, reads them, and cannot write them.
CREATE ROLE regress_rl_policy_app;
GRANT EXECUTE ON FUNCTION rl_allow(text, text, bigint), rl_peek(text, text)
	TO regress_rl_policy_app;
SET ROLE regress_rl_policy_app;
SELECT allowed, remaining FROM rl_allow('priv:a', 'p.gcra');
SELECT count(*) > 0 AS reads FROM rl_policies;
SELECT n, run(s) FROM (VALUES
	(1, $$INSERT INTO rl_policies (name, algo, "limit", "window") VALUES ('p.mine', 'gcra', 1000000, '1 s')$$),
	(2, $$UPDATE rl_policies SET "limit" = 1000000 WHERE name = 'p.gcra'$$),
	(3, $$DELETE FROM rl_policies WHERE name = 'p.gcra'$$),
	(4, $$TRUNCATE rl_policies$$),
	(5, $$SELECT rl_reset('priv:a', 'p.gcra')$$),
	(6, $$SELECT rl_allow('priv:a', 'gcra', 1000000, '1 s')$$),
	(7, $$SELECT * FROM rl_stats_policies$$)
) c(n, s) ORDER BY n;
RESET ROLE;
SELECT "limit" FROM rl_policies WHERE name = 'p.gcra';
REVOKE EXECUTE ON FUNCTION rl_allow(text, text, bigint), rl_peek(text, text)
	FROM regress_rl_policy_app;
DROP ROLE regress_rl_policy_app;

-- The local engine: the same calls by name, answered in shared memory.
SET ratelimit.engine = local;
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
SET ratelimit.failure_mode = error;
SELECT g, rl_allow('loc:a', 'p.fw') FROM generate_series(1, 4) g;
SELECT * FROM rl_peek('loc:a', 'p.fw');
SELECT * FROM rl_allow_many(ARRAY['loc:a', 'loc:b'], 'p.fw');
SELECT * FROM rl_allow_layered('loc:c', ARRAY['p.fw', 'p.gcra'], 3);
SELECT * FROM rl_allow_layered('loc:c', ARRAY['p.fw', 'p.gcra']);
SELECT * FROM rl_acquire('loc:d', 'p.tb', '1 second', 4);
SELECT rl_reset('loc:a', 'p.fw') AS reset, rl_reset_layered('loc:c', ARRAY['p.fw', 'p.gcra']) AS reset_layered;
SELECT * FROM rl_peek('loc:a', 'p.fw');
-- The parameter form is another limiter there too.
SELECT * FROM rl_peek('loc:b', 'fixed_window', 3, '10 seconds');
RESET ratelimit.engine;
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;

-- The cache: a policy's first call in a session reads rl_policies once,
-- later calls never (pg_stat_xact_user_tables counts this backend's scans
-- of the table not yet reported; the INSERT's commit emptied the cache).
INSERT INTO rl_policies (name, algo, "limit", "window")
	VALUES ('p.cached', 'fixed_window', 100, '1 minute');
BEGIN;
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) AS reads0
	FROM pg_stat_xact_user_tables WHERE relname = 'rl_policies' \gset
SELECT allowed FROM rl_allow('cache:a', 'p.cached');
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) - :reads0 AS reads_first_call
	FROM pg_stat_xact_user_tables WHERE relname = 'rl_policies';
SELECT count(*) FILTER (WHERE r.allowed) AS allowed
	FROM generate_series(1, 50) g, LATERAL rl_allow('cache:' || g, 'p.cached') r;
SELECT coalesce(seq_scan, 0) + coalesce(idx_scan, 0) - :reads0 AS reads_after_51_calls
	FROM pg_stat_xact_user_tables WHERE relname = 'rl_policies';
COMMIT;

DELETE FROM rl_policies;
DROP TABLE pol_posts;
