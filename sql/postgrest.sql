--
-- rl_postgrest_guard and the PostgREST form of errors
--
-- Roles of this suite are named regress_rl_pgrst_* (roles are
-- cluster-wide), its other objects pgrst_*; it drops only what it
-- created.  pg_regress creates the database afresh and its OID is part of
-- every Redis key, so no state of an earlier run can leak in.
--
-- Each request below is what PostgREST sends: a transaction (READ ONLY
-- for GET), the role switch, the request settings, then the
-- db-pre-request function.  The clock is pinned.
SET ratelimit.test_clock_ms = 1700000000000;

-- The setup the README gives: a pre-request function and the grants the
-- request roles need, the anonymous role and a role named in JWTs.  No
-- function of the extension is executable by PUBLIC (0.2.0), so these
-- grants are all the roles have.
CREATE ROLE regress_rl_pgrst_anon NOLOGIN;
CREATE ROLE regress_rl_pgrst_user NOLOGIN;
CREATE SCHEMA pgrst_api;
CREATE FUNCTION pgrst_api.pre_request() RETURNS void
LANGUAGE sql AS $$
	SELECT rl_postgrest_guard('gcra', 3, '1 minute')
$$;
REVOKE EXECUTE ON FUNCTION pgrst_api.pre_request() FROM PUBLIC;
GRANT USAGE ON SCHEMA pgrst_api TO regress_rl_pgrst_anon, regress_rl_pgrst_user;
GRANT EXECUTE ON FUNCTION pgrst_api.pre_request()
	TO regress_rl_pgrst_anon, regress_rl_pgrst_user;
GRANT EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text, bigint)
	TO regress_rl_pgrst_anon, regress_rl_pgrst_user;

-- Runs a call and returns the error as PostgREST reads it.
CREATE FUNCTION pgrst_call(query text,
						   OUT state text, OUT message text, OUT detail text)
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE query;
	state := '00000';
EXCEPTION WHEN OTHERS THEN
	GET STACKED DIAGNOSTICS state = RETURNED_SQLSTATE, message = MESSAGE_TEXT,
		detail = PG_EXCEPTION_DETAIL;
END $$;

-- Whether PostgREST accepts a PGRST error: MESSAGE an object with string
-- code and message (details and hint optional strings), DETAIL an object
-- with an integer status and headers whose values are all strings.
CREATE FUNCTION pgrst_parses(message text, detail text) RETURNS boolean
LANGUAGE sql AS $$
	SELECT json_typeof(m) = 'object'
		AND json_typeof(m->'code') = 'string'
		AND json_typeof(m->'message') = 'string'
		AND coalesce(json_typeof(m->'details'), 'string') IN ('string', 'null')
		AND coalesce(json_typeof(m->'hint'), 'string') IN ('string', 'null')
		AND json_typeof(d) = 'object'
		AND json_typeof(d->'status') = 'number'
		AND (d->>'status') ~ '^[0-9]+$'
		AND json_typeof(d->'headers') = 'object'
		AND (SELECT bool_and(json_typeof(value) = 'string') FROM json_each(d->'headers'))
	FROM (SELECT message::json AS m, detail::json AS d) j
$$;

--
-- GET /items as user u1 (JWT sub), limit 3 per minute
--
BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1","role":"regress_rl_pgrst_anon"}', true),
	   set_config('request.headers', '{"x-forwarded-for":"203.0.113.7, 10.0.0.1","user-agent":"curl"}', true),
	   set_config('request.method', 'GET', true),
	   set_config('request.path', '/items', true);
SELECT pgrst_api.pre_request();
-- On success the RateLimit fields are in response.headers: 2 left, quota
-- back in 20 s (GCRA: one unit every 20 s).
SELECT current_setting('response.headers');
SELECT pgrst_api.pre_request();
SELECT pgrst_api.pre_request();
SELECT current_setting('response.headers')::json->-2 AS last_ratelimit;
-- The fourth request: the error PostgREST turns into HTTP 429.
SELECT * FROM pgrst_call('SELECT pgrst_api.pre_request()');
SELECT pgrst_parses(message, detail),
	   message::json->>'code' AS code,
	   detail::json->>'status' AS status,
	   detail::json->'headers'->>'Retry-After' AS retry_after,
	   detail::json->'headers'->>'RateLimit' AS ratelimit,
	   detail::json->'headers'->>'RateLimit-Policy' AS policy
FROM pgrst_call('SELECT pgrst_api.pre_request()');
COMMIT;
-- The limiter was keyed by the JWT subject.
SELECT * FROM rl_peek('sub:u1', 'gcra', 3, '1 minute');

-- As psql shows it:
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1"}', true);
SELECT pgrst_api.pre_request();
ROLLBACK;

--
-- Anonymous requests: the X-Forwarded-For entry the trusted proxy wrote.
-- A proxy appends its peer's address to what the client sent, so with
-- ratelimit.trusted_proxy_hops = 1 (the default: one proxy, nginx say)
-- that is the right-most entry; everything left of it is the client's.
--
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"role":"regress_rl_pgrst_anon"}', true),
	   set_config('request.headers', '{"x-forwarded-for":"203.0.113.66 , 198.51.100.4 "}', true),
	   set_config('request.method', 'GET', true);
SELECT pgrst_api.pre_request();
ROLLBACK;
-- Counted as the right-most address (spaces trimmed), not the first.
SELECT * FROM rl_peek('ip:198.51.100.4', 'gcra', 3, '1 minute');
SELECT * FROM rl_peek('ip:203.0.113.66', 'gcra', 3, '1 minute');

-- Runs one request's guard with the given request.headers; its SQLSTATE.
CREATE FUNCTION pgrst_request(headers text, query text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('request.headers', headers, true);
	RETURN (pgrst_call(query)).state;
END $$;

-- A spoofing client behind one proxy writes a different fake first entry
-- per request; the proxy appends the real address, 198.51.100.9.  With a
-- limit of 2, only 2 of 4 get through (0.1.0, keyed by the first entry,
-- let all 4 through: each fake address was a fresh limiter).
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.method', 'GET', true);
SELECT g AS request,
	   pgrst_request(json_build_object('x-forwarded-for',
									   '10.66.0.' || g || ', 198.51.100.9')::text,
					 $$SELECT rl_postgrest_guard('fixed_window', 2, '1 minute')$$) AS state
FROM generate_series(1, 4) g;
-- Writing the victim's address first spends the spoofer's own quota.
SELECT pgrst_request('{"x-forwarded-for": "203.0.113.50, 198.51.100.9"}',
					 $$SELECT rl_postgrest_guard('fixed_window', 2, '1 minute')$$) AS state;
ROLLBACK;
SELECT 'ip:198.51.100.9' AS key, remaining
FROM rl_peek('ip:198.51.100.9', 'fixed_window', 2, '1 minute')
UNION ALL
SELECT 'ip:10.66.0.' || g, remaining
FROM generate_series(1, 4) g,
	 rl_peek('ip:10.66.0.' || g, 'fixed_window', 2, '1 minute')
UNION ALL
SELECT 'ip:203.0.113.50', remaining
FROM rl_peek('ip:203.0.113.50', 'fixed_window', 2, '1 minute');

-- Which limiter a request with this X-Forwarded-For is counted under,
-- for a number of trusted hops: 1 if under "key" (a fresh limiter each
-- time).  The connection's own address is none over pg_regress's Unix
-- socket, so the fallback is 'anonymous'.
CREATE FUNCTION pgrst_counted(hops int, xff text, key text) RETURNS bigint
LANGUAGE plpgsql AS $$
BEGIN
	PERFORM set_config('ratelimit.trusted_proxy_hops', hops::text, true);
	PERFORM rl_reset(key, 'sliding_log', 1000, '1 minute');
	PERFORM set_config('request.headers',
					   CASE WHEN xff IS NULL THEN '{}'
					   ELSE json_build_object('x-forwarded-for', xff)::text END,
					   true);
	PERFORM rl_postgrest_guard('sliding_log', 1000, '1 minute');
	RETURN (SELECT 1000 - remaining FROM rl_peek(key, 'sliding_log', 1000, '1 minute'));
END $$;

BEGIN;
SELECT set_config('request.method', 'GET', true);
SELECT hops,
	   CASE WHEN length(xff) > 60 THEN format('%s... (%s bytes)', left(xff, 8), length(xff))
	   ELSE quote_nullable(xff) END AS x_forwarded_for,
	   key, pgrst_counted(hops, xff, key) AS counted
FROM (VALUES
	-- one proxy (the default): the right-most entry
	(1, '203.0.113.7, 10.0.0.1', 'ip:10.0.0.1'),
	(1, '198.51.100.4', 'ip:198.51.100.4'),
	(1, E'\t198.51.100.4  ', 'ip:198.51.100.4'),
	-- two proxies: the second from the right; with exactly two entries
	-- the first was written by the outer proxy, not the client
	(2, '203.0.113.7, 198.51.100.4, 10.0.0.1', 'ip:198.51.100.4'),
	(2, '198.51.100.4, 10.0.0.1', 'ip:198.51.100.4'),
	(3, '1.1.1.1, 2.2.2.2, 198.51.100.4, 10.0.0.2, 10.0.0.1', 'ip:198.51.100.4'),
	-- fewer entries than trusted hops: the request did not come through
	-- all the proxies and its left-most entry may be the client's own
	-- text, so the header counts as absent
	(2, '198.51.100.4', 'anonymous'),
	(3, '198.51.100.4, 10.0.0.1', 'anonymous'),
	-- no proxy: the header is ignored, whatever it says
	(0, '198.51.100.4', 'anonymous'),
	(0, '198.51.100.4, 10.0.0.1', 'anonymous'),
	-- no header at all
	(1, NULL, 'anonymous'),
	-- an address is written back in canonical form, without the port;
	-- an IPv6 caller is its /64 (ratelimit.ipv6_prefix), whose other
	-- addresses it may choose freely
	(1, '198.51.100.4:5555', 'ip:198.51.100.4'),
	(1, '[2001:DB8:0::1]:443', 'ip:2001:db8::/64'),
	(1, '[2001:db8::1]', 'ip:2001:db8::/64'),
	(1, '2001:0db8:0000:0000:0000:0000:0000:0001', 'ip:2001:db8::/64'),
	(1, '2001:db8::ffff:1234:5678:9abc', 'ip:2001:db8::/64'),
	(1, '2001:db8:0:1::1', 'ip:2001:db8:0:1::/64'),
	(1, '::ffff:198.51.100.4', 'ip:198.51.100.4'),
	-- anything that is not an address never becomes a key
	(1, 'unknown', 'anonymous'),
	(1, '10.0.0.1, sub:u1', 'anonymous'),
	(1, '198.51.100.4,', 'anonymous'),
	(1, '', 'anonymous'),
	(1, '198.51.100.0/24', 'anonymous'),
	(1, '300.1.1.1', 'anonymous'),
	(1, 'fe80::1%eth0', 'anonymous'),
	(1, '198.51.100.4:', 'anonymous'),
	(1, '198.51.100.4:80x', 'anonymous'),
	(1, '[2001:db8::1', 'anonymous'),
	(1, '[198.51.100.4]', 'anonymous'),
	(1, repeat('9', 5000), 'anonymous')
) v(hops, xff, key);
ROLLBACK;
-- With ratelimit.ipv6_prefix = 128 each IPv6 address is its own caller.
BEGIN;
SET LOCAL ratelimit.ipv6_prefix = 128;
SELECT pgrst_counted(1, '[2001:db8::1]:443', 'ip:2001:db8::1') AS counted;
ROLLBACK;
-- ratelimit.ipv6_prefix runs from 16 to 128.
SET ratelimit.ipv6_prefix = 8;
-- The setting is superuser-only, from 0 to 16.
SET ratelimit.trusted_proxy_hops = 17;
SET ratelimit.trusted_proxy_hops = -1;
SET ROLE regress_rl_pgrst_anon;
SET ratelimit.trusted_proxy_hops = 2;
RESET ROLE;
SHOW ratelimit.trusted_proxy_hops;

-- A role named in the JWT is granted the same and counted by its subject.
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_user;
SELECT set_config('request.jwt.claims', '{"sub":"u9","role":"regress_rl_pgrst_user"}', true),
	   set_config('request.headers', '{"x-forwarded-for":"198.51.100.4"}', true);
SELECT pgrst_api.pre_request();
ROLLBACK;
SELECT * FROM rl_peek('sub:u9', 'gcra', 3, '1 minute');

-- A numeric subject is a subject too.
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":42}', true);
SELECT pgrst_api.pre_request();
ROLLBACK;
SELECT * FROM rl_peek('sub:42', 'gcra', 3, '1 minute');

-- '' settings, as PostgREST leaves them on a pooled connection, count as
-- absent: no sub, no header, so the connection's address (none over a
-- Unix socket: 'anonymous').
SELECT set_config('request.jwt.claims', '', false),
	   set_config('request.headers', '', false),
	   set_config('request.method', '', false),
	   set_config('response.headers', '', false);
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT pgrst_api.pre_request();
SELECT json_array_length(current_setting('response.headers')::json) AS headers;
ROLLBACK;
SELECT * FROM rl_peek(coalesce('ip:' || host(inet_client_addr()), 'anonymous'),
					  'gcra', 3, '1 minute');

-- An explicit key wins; headers already set are kept.
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1"}', true),
	   set_config('response.headers', '[{"Cache-Control": "no-store"}]', true);
SELECT rl_postgrest_guard('token_bucket', 10, '1500 ms', 'tenant:7');
SELECT current_setting('response.headers');
-- response.headers that is not an array is an error.
SELECT set_config('response.headers', '{"Cache-Control": "no-store"}', true);
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard('token_bucket', 10, '1500 ms', 'tenant:7')$$);
ROLLBACK;

-- Retry-After is whole seconds, rounded up: 3 per 10 s refuses the fourth
-- call for 3334 ms, so "4".
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u2"}', true);
SELECT rl_postgrest_guard('gcra', 3, '10 seconds') FROM generate_series(1, 3);
SELECT detail FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '10 seconds')$$);
ROLLBACK;

-- Bad arguments are plain errors.
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard(NULL, 3, '10 seconds')$$);
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '10 seconds', '')$$);
SELECT * FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 0, '10 seconds')$$);

-- A role without the grant cannot call it.
CREATE ROLE regress_rl_pgrst_other NOLOGIN;
SET ROLE regress_rl_pgrst_other;
SELECT state FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '10 seconds')$$);
RESET ROLE;

-- The alternative setup: a SECURITY DEFINER pre-request function, with a
-- fixed search_path, owned by a role that may call the guard.  The
-- request role then gets EXECUTE on that function only and cannot call
-- rl_postgrest_guard with a key of its choosing.  Headers set inside
-- still reach the response (only the search_path reverts at exit).
CREATE FUNCTION pgrst_api.pre_request_definer() RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, public AS $$
BEGIN
	PERFORM rl_postgrest_guard('gcra', 3, '1 minute');
END $$;
REVOKE EXECUTE ON FUNCTION pgrst_api.pre_request_definer() FROM PUBLIC;
GRANT USAGE ON SCHEMA pgrst_api TO regress_rl_pgrst_other;
GRANT EXECUTE ON FUNCTION pgrst_api.pre_request_definer() TO regress_rl_pgrst_other;
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_other;
SELECT set_config('request.jwt.claims', '{"sub":"u8"}', true),
	   set_config('response.headers', '', true);
SELECT pgrst_api.pre_request_definer();
SELECT current_setting('response.headers');
SELECT state FROM pgrst_call($$SELECT rl_postgrest_guard('gcra', 3, '1 minute', 'sub:u1')$$);
ROLLBACK;
SELECT * FROM rl_peek('sub:u8', 'gcra', 3, '1 minute');

--
-- Redis unavailable
--
SET ratelimit.redis_port = 1;
SET ratelimit.redis_nodes = '127.0.0.1:1';
-- open: the request passes, without RateLimit headers (nothing is known).
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u3"}', true);
SELECT pgrst_api.pre_request();
SELECT current_setting('response.headers', true) AS response_headers;
ROLLBACK;
-- closed: a 429 whose Retry-After is the time until the next attempt, and
-- no RateLimit field.
SET ratelimit.failure_mode = closed;
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u3"}', true);
SELECT pgrst_parses(message, detail), detail FROM pgrst_call('SELECT pgrst_api.pre_request()');
ROLLBACK;
-- error: SQLSTATE 08006, which PostgREST answers with 503.
SET ratelimit.failure_mode = error;
BEGIN READ ONLY;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT state, message FROM pgrst_call('SELECT pgrst_api.pre_request()');
ROLLBACK;
RESET ratelimit.failure_mode;
RESET ratelimit.redis_port;
RESET ratelimit.redis_nodes;

--
-- The throttling trigger inside a PostgREST request: POST /comments
--
CREATE TABLE pgrst_comments (id serial, author_id int, body text);
CREATE TRIGGER pgrst_comments_throttle BEFORE INSERT ON pgrst_comments
	FOR EACH ROW EXECUTE FUNCTION rl_throttle('author_id', 'fixed_window', '1', '1 minute');
GRANT INSERT ON pgrst_comments TO regress_rl_pgrst_anon;
GRANT USAGE ON SEQUENCE pgrst_comments_id_seq TO regress_rl_pgrst_anon;
INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'first');
BEGIN;
SET LOCAL ROLE regress_rl_pgrst_anon;
SELECT set_config('request.jwt.claims', '{"sub":"u1","role":"regress_rl_pgrst_anon"}', true),
	   set_config('request.method', 'POST', true),
	   set_config('request.path', '/pgrst_comments', true);
SELECT pgrst_parses(message, detail), state, message, detail
FROM pgrst_call($$INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'second')$$);
-- The same trigger in a PostgREST request identified by its method alone.
SELECT set_config('request.jwt.claims', '', true);
SELECT state, message::json->>'code' AS code
FROM pgrst_call($$INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'second')$$);
ROLLBACK;
-- Outside PostgREST ('' settings left behind) the trigger raises PT429.
SELECT set_config('request.method', '', false);
SELECT state, message, detail
FROM pgrst_call($$INSERT INTO pgrst_comments (author_id, body) VALUES (1, 'second')$$);

-- A statement trigger's too-large statement, inside PostgREST: a 429 too.
CREATE TABLE pgrst_bulk (author_id int);
CREATE TRIGGER pgrst_bulk_throttle AFTER INSERT ON pgrst_bulk
	REFERENCING NEW TABLE AS rl_new
	FOR EACH STATEMENT EXECUTE FUNCTION rl_throttle_statement('author_id', 'fixed_window', '2', '1 minute');
BEGIN;
SELECT set_config('request.method', 'POST', true);
SELECT pgrst_parses(message, detail), message, detail
FROM pgrst_call($$INSERT INTO pgrst_bulk VALUES (1), (1), (1)$$);
ROLLBACK;

DROP TABLE pgrst_comments, pgrst_bulk;
REVOKE EXECUTE ON FUNCTION rl_postgrest_guard(text, bigint, interval, text, bigint)
	FROM regress_rl_pgrst_anon, regress_rl_pgrst_user;
DROP SCHEMA pgrst_api CASCADE;
DROP FUNCTION pgrst_counted(int, text, text);
DROP FUNCTION pgrst_request(text, text);
DROP FUNCTION pgrst_call(text);
DROP FUNCTION pgrst_parses(text, text);
DROP ROLE regress_rl_pgrst_anon;
DROP ROLE regress_rl_pgrst_user;
DROP ROLE regress_rl_pgrst_other;
